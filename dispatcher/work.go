package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// result is the outcome of one attempt.
type result struct {
	err     error         // nil on success
	code    outbox.Code   // reason of a failure; empty for a snooze
	release bool          // return unstarted-equivalent work to PENDING
	snooze  bool          // the handler gave the event back (outbox.Snooze)
	delay   time.Duration // the snooze's delay
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
	var publishOnly []*item
	var handled []handledItem
	for _, it := range items {
		h := d.handler(it.event.Type)
		it.dest = d.destination(it.event)
		if h == nil && it.hasSlot {
			d.releaseSlots(1) // taken for a handler it does not have
		}
		switch {
		case h == nil && it.dest == "":
			if d.await(it) && d.held.begin(it, 0) {
				d.finish(it, result{err: errNoHandler, code: outbox.CodeNoHandler})
			}
		case h == nil:
			publishOnly = append(publishOnly, it)
		default:
			handled = append(handled, handledItem{it, h})
		}
	}
	if len(publishOnly) > 0 {
		wg.Go(func() { d.publish(d.beginPublish(publishOnly)) })
	}
	for _, hi := range handled {
		it, h := hi.item, hi.h
		if !it.hasSlot && !d.acquireSlot(it) {
			continue // let go meanwhile
		}
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
	d.publish(d.dropLost(toPublish))
}

// handledItem is an item of a batch with the handler it runs in.
type handledItem struct {
	item *item
	h    outbox.Handler
}

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

var errNoHandler = errors.New("no handler is registered for the event type and no publisher is configured")

// await waits until an older item of the same event, whose lease was lost
// while its handler kept running, has ended, so that one process never runs
// two attempts of one event at once. It returns false if the item's own
// context ended first.
func (d *Dispatcher) await(it *item) bool {
	if it.olderDone == nil {
		return true
	}
	select {
	case <-it.olderDone:
		return true
	case <-it.letGo:
		return false
	case <-it.batch.ctx.Done():
		return false
	}
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
	if !d.await(it) || !it.marked && len(d.markStarted([]*item{it})) == 0 || !d.held.begin(it, d.cfg.HandlerTimeout) {
		return nil, false
	}
	r := d.callHandler(it, h)
	if r.err != nil || it.dest == "" {
		return &r, false
	}
	return nil, true
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

// errHandlerReturned is the cause that ends a handler's context when the
// handler returns.
var errHandlerReturned = errors.New("pgoutbox: the handler returned")

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
		if d.held.begin(it, 0) {
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
func (d *Dispatcher) dropLost(items []*item) []*item {
	kept := items[:0]
	for _, it := range items {
		if d.held.loseIfExpired(it) {
			d.finish(it, result{})
			continue
		}
		kept = append(kept, it)
	}
	return kept
}

// publish sends the started items to the publisher in one call and finishes
// each with its own outcome.
func (d *Dispatcher) publish(items []*item) {
	if len(items) == 0 {
		return
	}
	msgs := make([]outbox.Message, len(items))
	for i, it := range items {
		msgs[i] = outbox.Message{Destination: it.dest, Event: it.event}
	}
	ctx, cancel := publishContext(items[0].batch.ctx, d.cfg.PublishTimeout)
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

// publishCode is the code of a publisher's error: invalid_event when the
// publisher cannot carry the event as it is, else publish_error.
func publishCode(err error) outbox.Code {
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
func (d *Dispatcher) finish(it *item, res result) {
	if d.held.finish(it, res) {
		d.reportLost(it.event.ID)
	}
}
