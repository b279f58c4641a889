package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// heldBatch is the events of one claim: one token, one timer for their
// local deadlines.
type heldBatch struct {
	token     uuid.UUID
	claimedAt time.Time // local time the claim came back
	ctx       context.Context
	cancel    context.CancelCauseFunc
	items     []*item
	remaining int         // items still held; guarded by Dispatcher.mu
	timer     *time.Timer // fires at the earliest local deadline of its items
	// timeout is the context, under ctx, whose deadline is
	// timeoutAt: the handler timeout of the batch's events that started in
	// the same timeoutGrain. Handlers starting together share its timer;
	// cancelling ctx releases them all. Guarded by Dispatcher.mu.
	timeout   context.Context
	timeoutAt time.Time
	// stopTimeout releases the latest timeout context's timer. Each is
	// also released with ctx, when the batch ends; this only satisfies
	// the rule that no cancel function is dropped.
	stopTimeout context.CancelFunc
}

// itemState is where one held event is in its life in this process.
type itemState int

const (
	itemQueued     itemState = iota // claimed, handler not started
	itemRunning                     // handler or publisher running
	itemDone                        // outcome waits for the completer
	itemCompleting                  // outcome is being written
)

// item is one held event.
type item struct {
	event  outbox.Event
	batch  *heldBatch
	ctx    context.Context // set by begin: the call's context, cancelled when this event's lease is lost
	cancel context.CancelCauseFunc
	state  itemState // guarded by Dispatcher.mu
	lost   bool      // the lease is gone; guarded by Dispatcher.mu
	// deadline is when this process stops trusting the lease (local
	// clock): set at claim, moved by each renewal of this very (id,
	// token). Guarded by Dispatcher.mu.
	deadline time.Time
	// The completer's record of failed writes of this outcome, guarded by
	// Dispatcher.mu: how many, how many the database refused, whether one
	// may have taken effect (its reply was lost), and when to try again.
	tries, refusals int
	late            int // failed writes past the local deadline
	maybeWritten    bool
	retryAt         time.Time
	// marked: the row shows that this attempt started (see start.go);
	// marking is closed by the marker once it is. Guarded by
	// Dispatcher.mu.
	marked  bool
	marking chan struct{}
	// hasSlot: the claim took a handler slot for this item (see
	// startsFor). Set before runBatch starts; read by it only.
	hasSlot bool
	// waited is how long the event had been due when the claim took it
	// (database clock).
	waited time.Duration
	// startedAt is when its handler started, and ran how long until its
	// outcome was handed to the completer; guarded by Dispatcher.mu.
	startedAt time.Time
	ran       time.Duration
	done      chan struct{}   // closed when the item is let go
	after     <-chan struct{} // an older item of the same event, lost but still running, must end first
	result    result          // set when state becomes itemDone
}

func (it *item) ref() lease.Ref { return lease.Ref{ID: it.event.ID, Token: it.batch.token} }

// result is the outcome of one attempt.
type result struct {
	err     error         // nil on success
	code    outbox.Code   // reason of a failure; empty for a snooze
	release bool          // return unstarted-equivalent work to PENDING
	snooze  bool          // the handler gave the event back (outbox.Snooze)
	delay   time.Duration // the snooze's delay
}

// start registers a claimed batch as held and runs it. slots is the
// number of handler slots startsFor took for the claim: the marked events
// among the first slots start in them, and the rest are given back.
func (d *Dispatcher) start(b lease.Batch, sentAt time.Time, slots int) {
	hb := &heldBatch{token: b.Token, claimedAt: time.Now()}
	hb.ctx, hb.cancel = context.WithCancelCause(d.workCtx)
	items := make([]*item, len(b.Events))
	deadline := d.localDeadline(sentAt)
	given := 0
	d.mu.Lock()
	for i, e := range b.Events {
		it := &item{event: e, batch: hb, deadline: deadline, marked: b.Started[i], done: make(chan struct{})}
		if i < len(b.Waited) {
			it.waited = b.Waited[i]
		}
		if it.marked && given < slots {
			it.hasSlot = true
			given++
		}
		if prev := d.latest[e.ID]; prev != nil {
			it.after = prev.done
		}
		items[i] = it
		d.held[it.ref()] = it
		d.latest[e.ID] = it
	}
	hb.items, hb.remaining = items, len(items)
	hb.timer = time.AfterFunc(deadline.Sub(d.cfg.now()), func() { d.onDeadline(hb) })
	d.mu.Unlock()
	d.releaseSlots(slots - given)
	go d.runBatch(items)
}

// runBatch runs the local handlers of a batch concurrently, publishes at
// once the events that have a destination and no handler, and then, in
// one call, those whose handler succeeded and that have a destination.
// The batch's handler slots are taken in claim order, so with Concurrency
// 1 the handlers of one batch run in claim order.
func (d *Dispatcher) runBatch(items []*item) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var toPublish []*item // started: their handler succeeded
	var publishOnly, handled []*item
	for _, it := range items {
		h, dest := d.handler(it.event.Type), d.destination(it.event)
		if h == nil && it.hasSlot {
			d.releaseSlots(1) // taken for a handler it does not have
		}
		switch {
		case h == nil && dest == "":
			if d.await(it) && d.begin(it, 0) {
				d.finish(it, result{err: errNoHandler, code: outbox.CodeNoHandler})
			}
		case h == nil:
			publishOnly = append(publishOnly, it)
		default:
			handled = append(handled, it)
		}
	}
	if len(publishOnly) > 0 {
		wg.Go(func() { d.publish(d.beginPublish(publishOnly)) })
	}
	for _, it := range handled {
		if !it.hasSlot && !d.acquireSlot(it) {
			continue // let go meanwhile
		}
		h := d.handler(it.event.Type)
		wg.Add(1)
		d.workers.Go(func() {
			defer wg.Done()
			defer d.releaseSlots(1)
			if res, ok := d.runHandler(it, h); ok {
				mu.Lock()
				toPublish = append(toPublish, it)
				mu.Unlock()
			} else if res != nil {
				d.finish(it, *res)
			}
		})
	}
	wg.Wait()
	d.publish(d.stillHeld(toPublish))
}

// runHandler starts the handler of an item that holds a slot, once its
// start is marked. It returns ok when the handler succeeded and the event
// has a destination (it is published with its batch), else the result to
// record, or nil when the item may not start (let go meanwhile).
//
// it.marked is read without the lock: it is set before runBatch starts
// (by the claim) or by the marker after markStarted queued the item, never
// while this reads it.
func (d *Dispatcher) runHandler(it *item, h outbox.Handler) (res *result, ok bool) {
	if !d.await(it) || !it.marked && len(d.markStarted([]*item{it})) == 0 || !d.begin(it, d.cfg.HandlerTimeout) {
		return nil, false
	}
	r := d.callHandler(it, h)
	if r.err != nil || d.destination(it.event) == "" {
		return &r, false
	}
	return nil, true
}

// beginPublish marks and begins the items that only need publishing, and
// returns those that may be published.
func (d *Dispatcher) beginPublish(items []*item) []*item {
	var ready []*item
	for _, it := range items {
		if d.await(it) {
			ready = append(ready, it)
		}
	}
	started := ready[:0]
	for _, it := range d.markStarted(ready) {
		if d.begin(it, 0) {
			started = append(started, it)
		}
	}
	return started
}

// errHandlerReturned is the cause that ends a handler's context when the
// handler returns.
var errHandlerReturned = errors.New("pgoutbox: the handler returned")

var errNoHandler = errors.New("no handler is registered for the event type and no publisher is configured")

// handler returns the handler of an event type, wrapped in its
// middleware: the one registered for the type, else DefaultHandler, else
// nil.
func (d *Dispatcher) handler(eventType string) outbox.Handler {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.handlers[eventType]; h != nil {
		return h
	}
	return d.defaultHandler
}

func (d *Dispatcher) destination(e outbox.Event) string {
	if d.cfg.Publisher == nil {
		return ""
	}
	return d.cfg.RouteFunc(e)
}

// acquireSlot waits for one of the Concurrency handler slots. It returns
// false when the item is let go (released at stop, or lost) first. A wait
// of slowSlotWait or more is noted, and again every slowFor/2 while it
// lasts, so that claims mark only what can start at once (see start.go).
func (d *Dispatcher) acquireSlot(it *item) bool {
	select {
	case d.slots <- struct{}{}:
		return true
	default:
	}
	slow := time.NewTimer(slowSlotWait)
	defer slow.Stop()
	for {
		select {
		case d.slots <- struct{}{}:
			return true
		case <-slow.C:
			d.noteSlowSlot()
			slow.Reset(slowFor / 2)
		case <-it.done:
			return false
		case <-it.batch.ctx.Done():
			return false
		}
	}
}

// await waits until an older item of the same event, whose lease was lost
// while its handler kept running, has ended, so that one process never runs
// two attempts of one event at once. It returns false if the item's own
// context ended first.
func (d *Dispatcher) await(it *item) bool {
	if it.after == nil {
		return true
	}
	select {
	case <-it.after:
		return true
	case <-it.done:
		return false
	case <-it.batch.ctx.Done():
		return false
	}
}

// stillHeld drops the items whose lease was lost or is past its local
// deadline (while they waited for the rest of their batch), finishing them
// as lost, so that they are not published after another replica may have
// taken them over. Like begin, it reads the deadline on the clock rather
// than wait for the timer.
func (d *Dispatcher) stillHeld(items []*item) []*item {
	kept := items[:0]
	for _, it := range items {
		d.mu.Lock()
		if !it.lost && d.expired(it) {
			d.loseLocked(it)
		}
		lost := it.lost
		d.mu.Unlock()
		if lost {
			d.finish(it, result{})
			continue
		}
		kept = append(kept, it)
	}
	return kept
}

// begin moves a queued item to running and gives it its context, with a
// deadline timeout from now when timeout > 0. It returns false when the
// item may not start: the dispatcher is stopping (the item will be
// released), or the lease is lost or past its local deadline (the item is
// let go as lost). The deadline is read here, on the clock, not left to
// the timer that marks items lost: after a pause of the process the timer
// may not have run yet when the handler would start.
func (d *Dispatcher) begin(it *item, timeout time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping || it.lost || it.state != itemQueued {
		return false
	}
	if d.expired(it) {
		d.loseLocked(it)
		return false
	}
	it.state = itemRunning
	it.startedAt = time.Now()
	parent := it.batch.ctx
	if timeout > 0 {
		parent = it.batch.timeoutContext(time.Now().Add(timeout), timeout)
	}
	it.ctx, it.cancel = context.WithCancelCause(parent)
	return true
}

// timeoutContext returns a context under the batch's whose deadline is at
// or after at, by less than timeoutGrain(timeout): events of one batch
// that start together share one timer instead of arming one each. The
// caller holds Dispatcher.mu.
func (b *heldBatch) timeoutContext(at time.Time, timeout time.Duration) context.Context {
	grain := timeoutGrain(timeout)
	at = at.Truncate(grain).Add(grain)
	if b.timeout == nil || !b.timeoutAt.Equal(at) {
		b.timeout, b.stopTimeout = context.WithDeadline(b.ctx, at)
		b.timeoutAt = at
	}
	return b.timeout
}

// timeoutGrain is how much longer than HandlerTimeout a handler may get so
// that handlers can share a timer: a 64th of the timeout, at most 10ms.
func timeoutGrain(timeout time.Duration) time.Duration {
	return max(min(timeout/64, 10*time.Millisecond), time.Microsecond)
}

// callHandler runs h in the item's context, recovering a panic. The
// context ends when h returns.
func (d *Dispatcher) callHandler(it *item, h outbox.Handler) (res result) {
	defer it.cancel(errHandlerReturned)
	defer func() {
		if p := recover(); p != nil {
			res = result{err: fmt.Errorf("handler panic: %v", p), code: outbox.CodePanic}
		}
	}()
	start := time.Now()
	err := h(it.ctx, it.event)
	d.noteHandlerTime(time.Since(start))
	if err == nil {
		return result{}
	}
	if delay, ok := outbox.SnoozeDelay(err); ok && !outbox.IsPermanent(err) {
		return d.snoozed(it, err, delay)
	}
	code := outbox.CodeHandlerError
	if errors.Is(err, context.DeadlineExceeded) {
		code = outbox.CodeTimeout // a timeout of the handler's own, or a middleware's
	}
	return d.classify(it, it.ctx, err, code)
}

// snoozed is the result of a handler that returned outbox.Snooze: the
// snooze, or a final failure with snooze_limit once the event has snoozed
// MaxSnoozes times. A snooze is honoured even at the hard stop or past
// the handler timeout: the handler said it did nothing.
func (d *Dispatcher) snoozed(it *item, err error, delay time.Duration) result {
	if it.event.Snoozes >= d.cfg.MaxSnoozes {
		return result{code: outbox.CodeSnoozeLimit, err: fmt.Errorf(
			"the event has snoozed %d times, the most MaxSnoozes allows: %w", it.event.Snoozes, err)}
	}
	return result{err: err, snooze: true, delay: delay}
}

// handlerContext applies a timeout, where there is one.
func (d *Dispatcher) handlerContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, timeout)
}

// classify turns a failed call's error into a result: timeout when the
// call's own deadline passed, release when the dispatcher's hard stop
// cancelled it (at-least-once only), else the given code.
//
// The hard stop is read from the batch's context, which carries no
// deadline: an item's own context may have passed its handler timeout
// before the stop, and the work is still released rather than charged.
func (d *Dispatcher) classify(it *item, ctx context.Context, err error, code outbox.Code) result {
	if errors.Is(context.Cause(it.batch.ctx), errHardStop) && d.cfg.Delivery == AtLeastOnce {
		return result{err: err, release: true}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = outbox.CodeTimeout
	}
	return result{err: err, code: code}
}

// publish sends the started items to the publisher in one call and finishes
// each with its own outcome.
func (d *Dispatcher) publish(items []*item) {
	if len(items) == 0 {
		return
	}
	msgs := make([]outbox.Message, len(items))
	for i, it := range items {
		msgs[i] = outbox.Message{Destination: d.destination(it.event), Event: it.event}
	}
	ctx, cancel := d.handlerContext(items[0].batch.ctx, d.cfg.PublishTimeout)
	defer cancel()
	errs := d.callPublisher(ctx, msgs)
	for i, it := range items {
		if errs[i] == nil {
			d.finish(it, result{})
			continue
		}
		d.finish(it, d.classify(it, ctx, errs[i], publishCode(errs[i])))
	}
}

// publishCode is the code of a publisher's error: invalid_event when the
// publisher cannot carry the event as it is, else publish_error.
func publishCode(err error) outbox.Code {
	if errors.Is(err, outbox.ErrInvalidEvent) {
		return outbox.CodeInvalidEvent
	}
	return outbox.CodePublishError
}

// callPublisher calls Publish, recovering a panic and checking that it
// returned one error per message.
func (d *Dispatcher) callPublisher(ctx context.Context, msgs []outbox.Message) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			errs = fill(len(msgs), fmt.Errorf("publisher panic: %v", p))
		}
	}()
	errs = d.cfg.Publisher.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		err := fmt.Errorf("publisher returned %d results for %d messages", len(errs), len(msgs))
		d.reportError("publisher broke its contract", err)
		return fill(len(msgs), err)
	}
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
