package lanes

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// state is where an item of a lane stands.
type state uint8

const (
	pending state = iota // to publish (again)
	done                 // acked
	parked               // set aside with its key
)

// item is one event of a lane. The items of one key are linked by next,
// in seq order.
type item struct {
	ev       *batch.Event
	dest     string
	next     int32 // the key's next item in the lane; -1: none
	state    state
	attempts int       // failed attempts so far
	retryAt  time.Time // by the clock's Mono: not published before
}

// queue is a key's pending items in the lane, from head on; a keyless
// event is a queue of its own.
type queue struct {
	key        string
	head, tail int32
}

// lane publishes its share of one batch: every key's items in order, at
// most one per key and call (a key's run for a key-ordered publisher).
type lane struct {
	l      *Lanes
	items  []item
	queues []queue          // keys with pending items
	index  map[string]int32 // key -> queue, valid while the batch is dealt
	start  int              // the queue the next wave starts with (round robin)
	wave   []int32          // the items of the current call
	msgs   []outbox.Message
	failed map[string]bool // keys that failed in the current call

	published, retries int
	parked             []batch.Parked
	newKeys            []string
}

// reset empties the lane for the next batch, keeping its buffers but
// none of the batch's events.
func (ln *lane) reset() {
	clear(ln.items)
	clear(ln.msgs)
	clear(ln.index)
	ln.items, ln.queues, ln.wave, ln.msgs = ln.items[:0], ln.queues[:0], ln.wave[:0], ln.msgs[:0]
	ln.start, ln.published, ln.retries, ln.parked, ln.newKeys = 0, 0, 0, nil, nil
}

// add appends an event to its key's queue.
func (ln *lane) add(e *batch.Event, key, dest string) {
	i := int32(len(ln.items))
	ln.items = append(ln.items, item{ev: e, dest: dest, next: -1})
	if key != "" {
		if q, ok := ln.index[key]; ok {
			ln.items[ln.queues[q].tail].next = i
			ln.queues[q].tail = i
			return
		}
		ln.index[key] = int32(len(ln.queues))
	}
	ln.queues = append(ln.queues, queue{key: key, head: i, tail: i})
}

// run publishes the lane's items until each is acked or parked, or ctx
// ends. While the circuit is open it waits; when a key's head waits for
// its retry, the lane's other keys go on.
func (ln *lane) run(ctx context.Context) {
	for len(ln.queues) > 0 && ctx.Err() == nil {
		if wait := ln.nextDue(ln.l.cfg.Clock.Mono()); wait > 0 {
			ln.sleep(ctx, wait)
			continue
		}
		wake := ln.l.gate.wait()
		plan, ok := ln.l.circuit.Plan(circuit.Types{}, ln.l.cfg.MaxPerCall)
		if !ok {
			select {
			case <-wake:
			case <-ctx.Done():
			}
			continue
		}
		ln.buildWave(plan.Limit, ln.l.cfg.Clock.Mono())
		errs, timedOut := ln.publish(ctx)
		if ctx.Err() != nil {
			if plan.Probe != 0 {
				ln.l.circuit.ProbeEnded(plan.Probe, true)
			}
			return
		}
		ln.settle(errs, timedOut, plan.Probe)
	}
}

// nextDue returns 0 when a key's head may be published now, else how long
// until the first may.
func (ln *lane) nextDue(now time.Time) time.Duration {
	wait := time.Duration(-1)
	for _, q := range ln.queues {
		d := ln.items[q.head].retryAt.Sub(now)
		if d <= 0 {
			return 0
		}
		if wait < 0 || d < wait {
			wait = d
		}
	}
	return wait
}

func (ln *lane) sleep(ctx context.Context, d time.Duration) {
	t := ln.l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// buildWave picks the next call's items, at most limit: the head of each
// key whose retry is due, and for a key-ordered publisher the key's later
// items too, starting where the last wave stopped.
func (ln *lane) buildWave(limit int, now time.Time) {
	ln.wave = ln.wave[:0]
	n, j := len(ln.queues), 0
	for ; j < n && len(ln.wave) < limit; j++ {
		q := ln.queues[(ln.start+j)%n]
		if ln.items[q.head].retryAt.After(now) {
			continue
		}
		for i := q.head; i >= 0 && len(ln.wave) < limit; i = ln.items[i].next {
			ln.wave = append(ln.wave, i)
			if !ln.l.keyOrdered {
				break
			}
		}
	}
	ln.start = (ln.start + j) % n
}

// publish makes one Publisher.Publish call of the wave, bounded by
// PublishTimeout, and reports whether that timeout ended it.
func (ln *lane) publish(ctx context.Context) (errs []error, timedOut bool) {
	ln.msgs = ln.msgs[:0]
	for _, i := range ln.wave {
		it := &ln.items[i]
		ln.msgs = append(ln.msgs, outbox.Message{Destination: it.dest, Event: it.ev.Event})
	}
	callCtx, cancel := context.WithTimeout(ctx, ln.l.cfg.PublishTimeout)
	defer cancel()
	start := ln.l.cfg.Clock.Mono()
	errs = ln.l.call(callCtx, ln.msgs)
	if f := ln.l.cfg.OnPublish; f != nil {
		f(len(ln.msgs), ln.l.cfg.Clock.Elapsed(start))
	}
	return errs, errors.Is(callCtx.Err(), context.DeadlineExceeded)
}

// settle applies a call's results. An outage changes nothing but the
// circuit: the wave stays pending, no retry spent. Otherwise each acked
// item is done, a not-attempted one stays pending, and a failed one is
// retried or parked with its key.
func (ln *lane) settle(errs []error, timedOut bool, probe uint64) {
	ln.checkNotAttempted(errs)
	outage, reached, cause := circuit.Verdict(errs)
	switch {
	case outage:
		ln.l.outage(cause)
		return
	case reached:
		ln.l.reachable()
	case probe != 0:
		ln.l.circuit.ProbeEnded(probe, true)
	}
	now := ln.l.cfg.Clock.Mono()
	for k, i := range ln.wave {
		switch err := errs[k]; {
		case ln.items[i].state != pending: // parked with an earlier item of its key
		case err == nil:
			ln.items[i].state = done
			ln.published++
		case errors.Is(err, outbox.ErrNotAttempted):
		default:
			ln.fail(i, err, timedOut, now)
		}
	}
	ln.advance()
}

// checkNotAttempted turns an outbox.ErrNotAttempted that no earlier
// failure of its key in the call explains into a failure (a publisher
// that breaks its contract so is not trusted with a loop of calls that
// charge nothing).
func (ln *lane) checkNotAttempted(errs []error) {
	clear(ln.failed)
	for k, i := range ln.wave {
		err := errs[k]
		if err == nil {
			continue
		}
		key := ln.items[i].ev.Key()
		if errors.Is(err, outbox.ErrNotAttempted) && (key == "" || !ln.failed[key]) {
			errs[k] = errUnexplained
		}
		if key != "" {
			if ln.failed == nil {
				ln.failed = make(map[string]bool)
			}
			ln.failed[key] = true
		}
	}
}

// errUnexplained is the failure of a message reported not attempted
// without an earlier failure of its key in the call.
var errUnexplained = errors.New("pgoutbox: the publisher did not attempt a message without an earlier failure of its key")

// fail schedules an item's retry, or parks its key when the error is
// permanent or the retries are spent.
func (ln *lane) fail(i int32, err error, timedOut bool, now time.Time) {
	it := &ln.items[i]
	it.attempts++
	perr := &PublishError{Seq: it.ev.Seq, ID: it.ev.Event.ID, Code: codeOf(err, timedOut), Attempt: it.attempts, Err: err}
	perr.Parked = outbox.IsPermanent(err) || it.attempts > ln.l.cfg.KeyRetries
	if perr.Parked {
		ln.park(i, perr)
	} else {
		ln.retries++
		it.retryAt = now.Add(ln.l.backoff.Delay(it.attempts))
	}
	if f := ln.l.cfg.OnError; f != nil {
		f(perr)
	}
}

// park sets the item aside with the failure, and the later items of its
// key behind it; the key goes to newKeys.
func (ln *lane) park(i int32, perr *PublishError) {
	it := &ln.items[i]
	key := it.ev.Key()
	it.state = parked
	ln.parked = append(ln.parked, parkedEvent(it.ev, key, perr.Code, perr.reason()))
	ln.newKeys = append(ln.newKeys, key)
	if key == "" {
		return // parked alone: keyless events order with nothing
	}
	behind := "parked behind event " + it.ev.Event.ID.String() + " of its key"
	for j := it.next; j >= 0; j = ln.items[j].next {
		if ln.items[j].state == pending {
			ln.items[j].state = parked
			ln.parked = append(ln.parked, parkedEvent(ln.items[j].ev, key, CodeKeyParked, behind))
		}
	}
}

// advance moves each queue's head past its done and parked items and
// drops the queues left empty.
func (ln *lane) advance() {
	live := ln.queues[:0]
	for _, q := range ln.queues {
		for q.head >= 0 && ln.items[q.head].state != pending {
			q.head = ln.items[q.head].next
		}
		if q.head >= 0 {
			live = append(live, q)
		}
	}
	ln.queues = live
	if ln.start >= len(live) {
		ln.start = 0
	}
}

// outage opens the circuit (a call found the destination unavailable).
func (l *Lanes) outage(cause error) {
	if ch, ok := l.circuit.Outage(); ok && l.cfg.OnCircuit != nil {
		l.cfg.OnCircuit(ch, cause)
	}
}

// reachable closes the circuit and wakes the lanes waiting on it.
func (l *Lanes) reachable() {
	ch, ok := l.circuit.Reachable()
	if !ok {
		return
	}
	l.gate.open()
	if l.cfg.OnCircuit != nil {
		l.cfg.OnCircuit(ch, nil)
	}
}
