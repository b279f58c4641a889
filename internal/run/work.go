package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// runBatch runs the local handlers of a batch concurrently, publishes at
// once the events that have a destination and no handler, and then, in
// one call, those whose handler succeeded and that have a destination.
// The events that have neither are released (see unroutable.go).
// Handlers run on workers that take the batch's events in claim order,
// each worker holding one handler slot, so with Concurrency 1 the handlers
// of one batch run in claim order.
//
// This is how the unordered mode runs a batch; the per-key mode runs
// runOrdered instead, and the claim-order mode runInSegments (see
// mode.go).
func (r *Runner) runBatch(items []*held.Item) {
	var wg sync.WaitGroup
	var publishOnly, unroutable []*held.Item
	var suspects []handledItem
	q := &batchQueue{allTaken: make(chan struct{}), items: make([]handledItem, 0, len(items))}
	lookup := r.handlerLookup()
	for _, it := range items {
		h := lookup(it.Event.Type)
		it.Dest = r.destination(it.Event)
		if h == nil && it.HasSlot {
			r.releaseSlots(1) // taken for a handler it does not have
			it.HasSlot = false
		}
		switch {
		case h == nil && it.Dest == "":
			unroutable = append(unroutable, it)
		case h == nil:
			publishOnly = append(publishOnly, it)
		case it.Suspect:
			suspects = append(suspects, handledItem{it, h})
		default:
			q.items = append(q.items, handledItem{it, h})
		}
	}
	r.releaseUnroutable(unroutable)
	if len(publishOnly) > 0 {
		wg.Go(func() { r.publish(r.beginPublish(publishOnly)) })
	}
	for _, hi := range suspects {
		go r.runSuspect(hi) // not waited for: the batch's publish must not wait for a suspect's turn
	}
	r.work(q, &wg)
	wg.Wait()
	r.publish(r.dropLost(q.toPublish))
}

// work runs the queue's handlers. Each item that the claim gave a slot
// starts a worker in it at once; more workers start as slots come free
// while items wait. When handlers are tiny (see handlersTiny) a handoff
// to another goroutine costs more than the call: workers then join in
// doubling waves, spawnPause apart, while items still wait, so that a few
// workers run a batch of tiny handlers and a stall of all of them (a
// downstream outage) still has every item started within a dozen pauses.
func (r *Runner) work(q *batchQueue, wg *sync.WaitGroup) {
	worker := func() {
		defer wg.Done()
		defer r.releaseSlots(1)
		for hi := q.next(); hi != nil; hi = q.next() {
			if res, publish, record := r.runHandler(hi.item, hi.h); publish {
				q.published(hi.item)
			} else if record {
				r.finish(hi.item, res)
			}
		}
	}
	for _, hi := range q.items {
		if hi.item.HasSlot {
			wg.Add(1)
			r.workers.Go(worker)
		}
	}
	wave := 1
	for spawned := 0; q.waiting() && r.acquireSlot(q.batch(), q.allTaken); {
		wg.Add(1)
		r.workers.Go(worker)
		if spawned++; spawned >= wave && r.handlersTiny() {
			q.pause(r.clock)
			spawned, wave = 0, 2*wave
		}
	}
}

// spawnPause is how long the workers of a batch of tiny handlers run
// before the next wave joins them (the runtime's timers make it about a
// millisecond).
const spawnPause = 200 * time.Microsecond

// batchQueue is the handled items of a batch, taken in order by its
// workers.
type batchQueue struct {
	items     []handledItem // fixed before the first worker starts
	taken     atomic.Int64  // how many items workers have taken
	allTaken  chan struct{} // closed when a worker takes the last item
	mu        sync.Mutex
	toPublish []*held.Item // their handler succeeded and they have a destination; guarded by mu
}

// next returns the next item, or nil when none is left.
func (q *batchQueue) next() *handledItem {
	i := q.taken.Add(1) - 1
	if i == int64(len(q.items))-1 {
		close(q.allTaken) // one worker takes the last index
	}
	if i < int64(len(q.items)) {
		return &q.items[i]
	}
	return nil
}

// pause waits spawnPause, or less when the workers take every item or
// the batch ends first.
func (q *batchQueue) pause(clk clock.Clock) {
	t := clk.NewTimer(spawnPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-q.allTaken:
	case <-q.batch().Ctx.Done():
	}
}

// waiting reports whether items wait for a worker.
func (q *batchQueue) waiting() bool { return q.taken.Load() < int64(len(q.items)) }

// batch is the claim of the queue's items (all items of a queue come from
// one claim).
func (q *batchQueue) batch() *held.Batch { return q.items[0].item.Batch }

func (q *batchQueue) published(it *held.Item) {
	q.mu.Lock()
	q.toPublish = append(q.toPublish, it)
	q.mu.Unlock()
}

// handledItem is an item of a batch with the handler it runs in.
type handledItem struct {
	item *held.Item
	h    outbox.Handler
}

// handler returns the handler of an event type, wrapped in its
// middleware: the one registered for the type, else DefaultHandler, else
// nil. The handlers are fixed at Start.
func (r *Runner) handler(eventType string) outbox.Handler {
	if h := r.handlers[eventType]; h != nil {
		return h
	}
	return r.fallback
}

// handlerLookup returns a handler function for one batch: it remembers
// the last event type it looked up, so that a batch of one type looks the
// map up once, not once per event.
func (r *Runner) handlerLookup() func(eventType string) outbox.Handler {
	var lastType string
	var last outbox.Handler
	return func(eventType string) outbox.Handler {
		if last == nil || eventType != lastType {
			lastType, last = eventType, r.handler(eventType)
		}
		return last
	}
}

// destination is where the publisher sends e: RouteFunc's answer, for an
// event of one of PublishTypes (when set); "" when it is not published.
func (r *Runner) destination(e *outbox.Event) string {
	if r.cfg.Publisher == nil || r.cfg.PublishSet != nil && !r.cfg.PublishSet[e.Type] {
		return ""
	}
	return r.cfg.RouteFunc(*e)
}

// await reports whether an item may start once no older item of the same
// event is held, so that one process never runs two attempts of one event
// at once. An older outcome waiting for the completer is waited for (the
// completer lets it go within a bounded time); it returns false if the
// item's own context ends first.
//
// An older call still running (its lease lost, it ignores its context,
// see dispatcher/overrun.go) may never return. Claims leave such events out
// (lease.ClaimParams.Skip), but one may come back to this process still:
// an ordered claim takes it, or the claim was sent before the older lease
// was found lost. It is then given up at once, unstarted, rather than
// held behind that call: released to PENDING (uncharged; the claims of
// this process now leave it out, so another replica takes it), or in the
// per-key mode, whose claims cannot leave it out and whose releases
// wake a claim at once, let go with its lease left to expire (the mode's
// letGoBehindCall).
func (r *Runner) await(it *held.Item) bool {
	if it.OlderDone == nil {
		return true
	}
	if !it.BehindCall {
		select {
		case <-it.OlderDone:
			return true
		case <-r.held.LetGo(it):
			return false
		case <-it.Batch.Ctx.Done():
			return false
		}
	}
	select {
	case <-it.OlderDone:
		return true
	default:
	}
	r.mode.letGoBehindCall(it)
	return false
}

// releaseBehindCall releases to PENDING an item whose older call still
// runs (see await).
func (r *Runner) releaseBehindCall(it *held.Item) {
	r.cfg.Release([]*held.Item{it}, "release of an event whose earlier call still runs failed; its lease will expire")
}

// runHandler starts the handler of an item that holds a slot, once its
// start is marked. It returns publish when the handler succeeded and the
// event has a destination (it is published with its batch), else record
// and the result to record; neither when the item may not start (let go
// meanwhile).
//
// it.marked is read without the lock: it is set before runBatch starts
// (by the claim) or by the marker after markStarted queued the item, never
// while this reads it.
func (r *Runner) runHandler(it *held.Item, h outbox.Handler) (res held.Result, publish, record bool) {
	if !r.await(it) || !it.Marked() && len(r.markStarted([]*held.Item{it})) == 0 || !r.held.Begin(it, r.cfg.HandlerTimeout) {
		return held.Result{}, false, false
	}
	res = r.callHandler(it, h)
	if res.Err != nil || it.Dest == "" {
		return res, false, true
	}
	r.held.CallStarts([]*held.Item{it}, time.Time{}, held.PhaseAwaitPublish) // no timeout of its own (see held.Set.Live)
	return held.Result{}, true, false
}

// callHandler runs h in the item's context, recovering a panic, its
// instruments' included (a sampler's or a span processor's: the call then
// fails with code panic). The context ends when h returns.
func (r *Runner) callHandler(it *held.Item, h outbox.Handler) (res held.Result) {
	defer it.Cancel(errHandlerReturned)
	span := report.NoSpan
	var ran time.Duration // measured once the handler returned
	defer func() {
		if p := recover(); p != nil {
			res = held.Result{Err: fmt.Errorf("handler panic: %v", p), Code: outbox.CodePanic}
			r.report.Panic("handler", it.Event.Type, it.Event.ID, res.Err)
		}
		res.Ran = ran
		r.endHandlerCall(it, span, res)
	}()
	r.report.Metrics().Started(it.Event, it.Suspect, it.StartedAt()) // it.startedAt was set by begin, on this goroutine
	var ctx context.Context
	ctx, span = r.report.Spans().HandlerSpan(it.Context(), it.Event)
	err := h(ctx, *it.Event)
	ran = max(r.clock.Elapsed(it.StartedAt()), time.Nanosecond)
	r.noteHandlerTime(ran)
	if err == nil {
		return held.Result{}
	}
	if delay, ok := outbox.SnoozeDelay(err); ok && !outbox.IsPermanent(err) {
		return r.snoozed(it, err, delay)
	}
	code := outbox.CodeHandlerError
	if errors.Is(err, context.DeadlineExceeded) {
		code = outbox.CodeTimeout // a timeout of the handler's own, or a middleware's
	}
	return r.classify(it, it.Context(), err, code)
}

// errHandlerReturned is the cause that ends a handler's context when the
// handler returns.
var errHandlerReturned = errors.New("pgoutbox: the handler returned")

// snoozed is the result of a handler that returned outbox.Snooze: the
// snooze, or a final failure with snooze_limit once the event has snoozed
// MaxSnoozes times. A snooze is honoured even at the hard stop or past
// the handler timeout: the handler said it did nothing.
func (r *Runner) snoozed(it *held.Item, err error, delay time.Duration) held.Result {
	if it.Event.Snoozes >= r.cfg.MaxSnoozes {
		return held.Result{Code: outbox.CodeSnoozeLimit, Err: fmt.Errorf(
			"the event has snoozed %d times, the most MaxSnoozes allows: %w", it.Event.Snoozes, err)}
	}
	return held.Result{Err: err, Snooze: true, Delay: delay}
}

// classify turns a failed call's error into a result: timeout when the
// call's own deadline passed, release when the dispatcher's hard stop
// cancelled it (at-least-once only), else the given code.
//
// The hard stop is read from the batch's context, which carries no
// deadline: an item's own context may have passed its handler timeout
// before the stop, and the work is still released rather than charged.
func (r *Runner) classify(it *held.Item, ctx context.Context, err error, code outbox.Code) held.Result {
	if errors.Is(context.Cause(it.Batch.Ctx), ErrHardStop) && !r.cfg.AtMostOnce {
		return held.Result{Err: err, Release: true}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = outbox.CodeTimeout
	}
	return held.Result{Err: err, Code: code}
}

// beginPublish marks and begins the items that only need publishing, and
// returns those that may be published.
func (r *Runner) beginPublish(items []*held.Item) []*held.Item {
	var ready []*held.Item
	for _, it := range items {
		if r.await(it) {
			ready = append(ready, it)
		}
	}
	started := ready[:0]
	for _, it := range r.markStarted(ready) {
		if r.held.Begin(it, 0) {
			r.report.Metrics().Started(it.Event, it.Suspect, it.StartedAt())
			started = append(started, it)
		}
	}
	return started
}

// dropLost drops the items whose lease was lost or is past its local
// deadline (while they waited for the rest of their batch), finishing them
// as lost, so that they are not published after another replica may have
// taken them over. Like begin, it reads the deadline on the clock rather
// than wait for the timer.
func (r *Runner) dropLost(items []*held.Item) []*held.Item {
	kept := items[:0]
	for _, it := range items {
		if r.held.LoseIfExpired(it) {
			r.finish(it, held.Result{})
			continue
		}
		kept = append(kept, it)
	}
	return kept
}

// publish sends the started items to the publisher in one call and finishes
// each with its own outcome; a call that found the destination unavailable
// returns them to PENDING and opens the circuit (see circuit.go).
func (r *Runner) publish(items []*held.Item) {
	if len(items) == 0 || r.heldBack(items) {
		return
	}
	msgs := make([]outbox.Message, len(items))
	for i, it := range items {
		msgs[i] = outbox.Message{Destination: it.Dest, Event: *it.Event}
	}
	ctx, cancel := publishContext(items[0].Batch.Ctx, r.cfg.PublishTimeout)
	defer cancel()
	r.held.CallStarts(items, r.clock.Mono().Add(r.cfg.PublishTimeout), held.PhasePublish)
	spanCtx, endSpans := r.report.Spans().PublishSpan(ctx, msgs)
	start := r.clock.Mono()
	errs := r.callPublisher(spanCtx, msgs)
	r.report.Metrics().Published(r.clock.Elapsed(start))
	endSpans(errs)
	outage := r.judgePublish(ctx, errs)
	for i, it := range items {
		if errs[i] == nil {
			r.finish(it, held.Result{})
			continue
		}
		r.finish(it, r.publishFailure(it, ctx, errs[i], outage))
	}
}

// publishContext is the context of one publish call: under the batch's,
// with PublishTimeout when there is one.
func publishContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, timeout)
}

// callPublisher calls Publish, recovering a panic and checking that it
// returned one error per message.
func (r *Runner) callPublisher(ctx context.Context, msgs []outbox.Message) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			errs = fill(len(msgs), fmt.Errorf("publisher panic: %v", p))
			r.report.Panic("publisher", "", msgs[0].Event.ID, errs[0])
		}
	}()
	errs = r.cfg.Publisher.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		err := fmt.Errorf("pgoutbox: the publisher returned %d results for %d messages", len(errs), len(msgs))
		r.report.Error("publisher broke its contract", err)
		return fill(len(msgs), err)
	}
	return errs
}

// PublishCode is the code of a publisher's error: invalid_event when the
// publisher cannot carry the event as it is, else publish_error.
func PublishCode(err error) outbox.Code {
	if errors.Is(err, outbox.ErrInvalidEvent) {
		return outbox.CodeInvalidEvent
	}
	return outbox.CodePublishError
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// finish hands an item's result to the completer. An item whose lease was
// lost meanwhile is let go and reported as outbox.ErrLockLost.
func (r *Runner) finish(it *held.Item, res held.Result) {
	if r.held.Finish(it, res) {
		r.report.Lost(it.Event.ID)
	}
}
