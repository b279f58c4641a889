package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// finish hands an item's result to the completer. An item whose lease was
// lost meanwhile is dropped and reported as outbox.ErrLockLost.
func (d *Dispatcher) finish(it *item, res result) {
	d.mu.Lock()
	if it.lost {
		d.removeLocked(it)
		d.mu.Unlock()
		d.reportLost(it.event.ID)
		return
	}
	it.state, it.result = itemDone, res
	d.pending = append(d.pending, it)
	d.mu.Unlock()
	signal(d.flush)
}

// completeLoop writes outcomes as they arrive. While one write is in
// flight the next outcomes gather, so under load each statement carries a
// batch (group commit) and when idle each outcome is written at once.
func (d *Dispatcher) completeLoop(quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-d.flush:
			for d.completeOnce() {
			}
		}
	}
}

// completeOnce writes the waiting outcomes and reports whether there were
// any.
func (d *Dispatcher) completeOnce() bool {
	items, dropped := d.takePending()
	for _, it := range dropped {
		d.reportLost(it.event.ID)
	}
	if len(items) == 0 {
		return len(dropped) > 0
	}
	if err := d.complete(items); err != nil {
		d.reportError("completion failed, will retry", err)
		d.requeue(items)
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// takePending moves waiting outcomes to completing, dropping those whose
// lease was lost.
func (d *Dispatcher) takePending() (items, dropped []*item) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, it := range d.pending {
		if it.lost {
			d.removeLocked(it)
			dropped = append(dropped, it)
			continue
		}
		it.state = itemCompleting
		items = append(items, it)
	}
	d.pending = nil
	return items, dropped
}

// requeue puts outcomes whose write failed back in line.
func (d *Dispatcher) requeue(items []*item) {
	d.mu.Lock()
	var back []*item
	for _, it := range items {
		if d.held[it.ref()] == it {
			it.state = itemDone
			back = append(back, it)
		}
	}
	d.pending = append(back, d.pending...)
	d.mu.Unlock()
	signal(d.flush)
}

// complete writes the outcomes of items: releases, then successes and
// failures in one round trip.
func (d *Dispatcher) complete(items []*item) error {
	ctx, cancel := d.opContext()
	defer cancel()
	releases, params := d.outcomes(items)
	if err := d.release(ctx, releases); err != nil {
		return err
	}
	res, err := d.store.Complete(ctx, d.pool, params)
	if err != nil {
		return err
	}
	d.applyComplete(items, res)
	return nil
}

// outcomes sorts items into those to release and the outcomes to record.
func (d *Dispatcher) outcomes(items []*item) (releases []*item, params lease.CompleteParams) {
	params.DeleteSent = d.cfg.DeleteSent
	for _, it := range items {
		switch {
		case it.result.release:
			releases = append(releases, it)
		case it.result.err == nil:
			params.Sent = append(params.Sent, it.ref())
		default:
			params.Failed = append(params.Failed, d.failure(it))
		}
	}
	return releases, params
}

// failure decides whether a failed attempt is final and when to retry.
func (d *Dispatcher) failure(it *item) lease.Failure {
	r := it.result
	final := d.cfg.Delivery == AtMostOnce || outbox.IsPermanent(r.err) ||
		r.code == outbox.CodeNoHandler || it.event.Attempt >= d.cfg.MaxAttempts
	return lease.Failure{
		Ref: it.ref(), Code: r.code, Message: r.err.Error(), Final: final,
		Delay: d.cfg.Backoff.Delay(it.event.Attempt),
	}
}

// applyComplete lets go of completed items, fires hooks and counts.
func (d *Dispatcher) applyComplete(items []*item, res lease.CompleteResult) {
	byID := make(map[uuid.UUID]*item, len(items))
	for _, it := range items {
		byID[it.event.ID] = it
	}
	d.removeItems(items)
	for _, id := range res.Sent {
		d.stats.sent.Add(1)
		if d.cfg.OnSent != nil {
			d.cfg.OnSent(byID[id].event)
		}
	}
	if len(res.Retried) > 0 {
		signal(d.retried)
	}
	for _, r := range res.Retried {
		it := byID[r.ID]
		d.stats.retried.Add(1)
		if d.cfg.OnRetry != nil {
			d.cfg.OnRetry(it.event, it.result.code, it.result.err, r.NextAttemptAt)
		}
	}
	for _, f := range res.Failed {
		it := byID[f.ID]
		d.stats.failed.Add(1)
		if d.cfg.OnFailed != nil {
			d.cfg.OnFailed(it.event, it.result.code, it.result.err)
		}
	}
	for _, id := range res.Lost {
		d.reportLost(id)
	}
}

// release returns items to PENDING without spending an attempt.
func (d *Dispatcher) release(ctx context.Context, items []*item) error {
	if len(items) == 0 {
		return nil
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.ref()
	}
	released, err := d.store.Release(ctx, d.pool, refs)
	if err != nil {
		return err
	}
	d.removeItems(items)
	d.stats.released.Add(uint64(len(released)))
	return nil
}

// reportLost counts and reports an outcome that could not be recorded.
func (d *Dispatcher) reportLost(id uuid.UUID) {
	d.stats.lockLost.Add(1)
	d.reportError("outcome not recorded", fmt.Errorf("event %s: %w", id, outbox.ErrLockLost))
}

// removeItems lets go of items.
func (d *Dispatcher) removeItems(items []*item) {
	d.mu.Lock()
	for _, it := range items {
		d.removeLocked(it)
	}
	d.mu.Unlock()
	signal(d.capacity)
}

// removeLocked lets go of one item: it is no longer held by this process.
func (d *Dispatcher) removeLocked(it *item) {
	if d.held[it.ref()] != it {
		return
	}
	delete(d.held, it.ref())
	if d.latest[it.event.ID] == it {
		delete(d.latest, it.event.ID)
	}
	close(it.done)
	b := it.batch
	if b.remaining--; b.remaining == 0 {
		b.timer.Stop()
		b.cancel(nil)
	}
	if d.stopping && len(d.held) == 0 {
		close(d.idle)
	}
	signal(d.capacity)
}
