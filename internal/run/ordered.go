package run

import (
	"context"
	"errors"
	"sync"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Per-key ordering. Under Ordering PerKey the claim (internal/lease) takes,
// for each order key, a run of the key's events from its head: the
// earliest event of the key that is not SENT (or FAILED and skipped, or
// FAILED at all under SkipFailed), all of them due and PENDING, so that
// no other dispatcher holds an earlier event of the key meanwhile. The
// dispatcher then delivers each run in order:
//
//   - The batch's events are grouped into chains, one per key (per key
//     and type under ScopeKeyAndType) in seq
//     order; an event without a key is a chain of its own.
//   - The batch runs in waves: wave j is the j-th step of every chain
//     still going. A step is one event, or, when the Publisher is an
//     outbox.KeyOrderedPublisher that keeps each key's order, the run of
//     consecutive publish-only events of the chain. A wave is marked
//     started in one statement, its handlers run at once (up to
//     Concurrency), and then its publishable events go to the publisher
//     in one call.
//   - A chain whose step did not succeed (a retry, a snooze, a lost
//     lease, a release, an event it cannot route (see unroutable.go), or
//     a FAILED event under BlockKey) stops: its
//     remaining events are released to PENDING unstarted and uncharged,
//     and the key's head, the event that did not succeed, holds them
//     back until it succeeds. Under SkipFailed a FAILED event does not
//     stop its chain.
//
// No claim marks an event started under PerKey (see startsFor): each wave
// is marked right before it runs, so that a crash charges a recovery only
// to the events of the wave in progress. A wave with more handlers than
// Concurrency is marked whole all the same, those waiting for a slot
// included: marking each as it starts (as runHandler does for the events
// a claim did not mark) cost 4 to 5 times the time of a run of 5,000
// events over 100 keys at Concurrency 4 (one round trip per event and
// wave), so a crash charges them too and they come back as suspects.

// runOrdered runs a batch in the per-key mode, wave by wave.
func (r *Runner) runOrdered(items []*held.Item) {
	runs := r.publishesKeysInOrder()
	chains := r.chains(items)
	for len(chains) > 0 {
		steps := make([][]handledItem, len(chains))
		for i, c := range chains {
			steps[i] = nextStep(c, runs)
		}
		r.runWave(steps)
		going := chains[:0]
		for i, c := range chains {
			if stop := r.stopsAt(steps[i]); stop >= 0 {
				r.releaseRest(c[stop+1:])
			} else if len(c) > len(steps[i]) {
				going = append(going, c[len(steps[i]):])
			}
		}
		chains = going
	}
}

// publishesKeysInOrder reports whether the publisher keeps the order of
// each key within a call (outbox.KeyOrderedPublisher).
func (r *Runner) publishesKeysInOrder() bool {
	p, ok := r.cfg.Publisher.(outbox.KeyOrderedPublisher)
	return ok && p.PublishesKeysInOrder()
}

// chains groups a batch's items by the order key the claim read (under
// ScopeKeyAndType, by key and event type), each
// chain in seq order (the ordered claim returns each key's events in seq
// order), with the handler and destination of each item. A
// chain of a key comes where the key's first item is in the batch; an
// item without a key is a chain of its own.
func (r *Runner) chains(items []*held.Item) [][]handledItem {
	lookup := r.handlerLookup()
	var chains [][]handledItem
	byKey := make(map[string]int)
	for _, it := range items {
		if it.HasSlot { // no claim gives one under PerKey (see startsFor); never kept
			r.releaseSlots(1)
			it.HasSlot = false
		}
		it.Dest = r.destination(it.Event)
		hi := handledItem{it, lookup(it.Event.Type)}
		if k := r.chainKey(it); k != "" {
			if i, ok := byKey[k]; ok {
				chains[i] = append(chains[i], hi)
				continue
			}
			byKey[k] = len(chains)
		}
		chains = append(chains, []handledItem{hi})
	}
	return chains
}

// chainKey is what orders it among the batch's items: its order key, and
// under ScopeKeyAndType its type too; "" for none.
func (r *Runner) chainKey(it *held.Item) string {
	if it.Key == "" || !r.cfg.ByType {
		return it.Key
	}
	return it.Key + "\x00" + it.Event.Type
}

// nextStep is the first step of a chain: its first item, or with runs the
// chain's leading publish-only items.
func nextStep(chain []handledItem, runs bool) []handledItem {
	n := 1
	for runs && publishOnly(chain[n-1]) && n < len(chain) && publishOnly(chain[n]) {
		n++
	}
	return chain[:n]
}

// publishOnly reports whether an item has a destination and no handler.
func publishOnly(hi handledItem) bool { return hi.h == nil && hi.item.Dest != "" }

// runWave runs one step of each chain: the wave is marked started, its
// handlers run up to Concurrency at once, suspects take their turn, and
// then every event of the wave whose handler succeeded, or that has no
// handler, is published in one call. runWave returns once each event's
// result is known.
func (r *Runner) runWave(steps [][]handledItem) {
	var wg sync.WaitGroup
	q := &batchQueue{allTaken: make(chan struct{})}
	var toMark, unroutable []*held.Item
	var publishRuns [][]handledItem
	for _, st := range steps {
		hi := st[0]
		switch {
		case hi.h == nil && hi.item.Dest == "":
			unroutable = append(unroutable, hi.item) // released: its key stops here (see stopsAt)
		case hi.h == nil:
			publishRuns = append(publishRuns, st)
			for _, p := range st {
				if p.item.BehindCall {
					break // most likely let go unstarted (see await); beginRun marks it if not
				}
				toMark = append(toMark, p.item)
			}
		case hi.item.Suspect:
			wg.Go(func() { r.runSuspect(hi) }) // marks itself, alone among suspects
		default:
			q.items = append(q.items, hi)
			if !hi.item.BehindCall { // else runHandler marks it if it starts at all
				toMark = append(toMark, hi.item)
			}
		}
	}
	r.releaseUnroutable(unroutable)
	if len(toMark) > 0 {
		r.markStarted(toMark) // one statement for the wave; what may not start fails begin
	}
	r.work(q, &wg)
	wg.Wait()
	var toPublish []*held.Item
	for _, st := range publishRuns {
		toPublish = append(toPublish, r.beginRun(st)...)
	}
	r.publish(append(toPublish, r.dropLost(q.toPublish)...))
}

// beginRun begins a run of publish-only items of one key in order, up to
// the first that may not begin (the others stay unstarted, and are
// released with the rest of the chain). The wave marked the run up to its
// first item behind a running call (see runWave): such an item is most
// likely let go by await, and must then carry no start mark, which would
// cost the event a recovery when its lease expires although nothing ran;
// it is marked here if it starts after all.
func (r *Runner) beginRun(run []handledItem) []*held.Item {
	var begun []*held.Item
	for _, hi := range run {
		it := hi.item
		if !r.await(it) || !it.Marked() && len(r.markStarted([]*held.Item{it})) == 0 || !r.held.Begin(it, 0) {
			break
		}
		r.report.Metrics().Started(hi.item.Event, hi.item.Suspect, hi.item.StartedAt())
		begun = append(begun, hi.item)
	}
	return begun
}

// stopsAt returns the index of the first event of a chain's step that
// stops the chain (see passes), or -1 when the chain goes on.
func (r *Runner) stopsAt(step []handledItem) int {
	for i, hi := range step {
		res, ok := r.held.Outcome(hi.item)
		if !ok || !r.passes(hi.item, res) {
			return i
		}
	}
	return -1
}

// passes reports whether an event whose attempt ended with res lets the
// later events of its key go on.
func (r *Runner) passes(it *held.Item, res held.Result) bool {
	switch {
	case res.Release || res.Snooze:
		return false
	case res.Err == nil:
		return true
	}
	return r.cfg.SkipFailed && r.cfg.FinalFailure(it)
}

// releaseRest releases the rest of a chain that stopped, those of its
// events that never began, through the completer (no attempt spent), and
// counts them. (A run's events that a KeyOrderedPublisher did not attempt
// were released by publish.)
func (r *Runner) releaseRest(rest []handledItem) {
	items := make([]*held.Item, len(rest))
	for i, hi := range rest {
		items[i] = hi.item
	}
	r.report.Counters.OrderReleased.Add(uint64(r.held.ReleaseQueued(items)))
}

// publishResult is the result of a message the publisher did not
// deliver: a release, uncharged, when the error wraps
// outbox.ErrNotAttempted (a KeyOrderedPublisher did not try it, since an
// earlier message of its key failed), else a failed attempt.
func (r *Runner) publishResult(it *held.Item, ctx context.Context, err error) held.Result {
	if errors.Is(err, outbox.ErrNotAttempted) {
		r.report.Counters.OrderReleased.Add(1)
		return held.Result{Err: err, Release: true}
	}
	return r.classify(it, ctx, err, PublishCode(err))
}
