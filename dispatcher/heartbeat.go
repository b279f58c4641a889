package dispatcher

import (
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// heartbeatLoop renews every held lease about every third of the lease
// duration, in one statement per beat.
func (d *Dispatcher) heartbeatLoop(quit <-chan struct{}) {
	ticker := time.NewTicker(d.cfg.LeaseDuration / 3)
	defer ticker.Stop()
	for {
		select {
		case <-quit:
			return
		case <-ticker.C:
			d.renew()
		}
	}
}

// renew extends the leases of all held events. Events the database did not
// renew are lost: their handlers' contexts are cancelled and their outcomes
// will not be written. A failed renewal changes nothing locally; the local
// deadline then decides.
func (d *Dispatcher) renew() {
	items := d.renewable()
	if len(items) == 0 {
		return
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.ref()
	}
	ctx, cancel := d.opContext()
	defer cancel()
	sentAt := d.cfg.Test.Now()
	renewed, err := d.store.Renew(ctx, d.pool, refs, d.cfg.LeaseDuration)
	if err != nil {
		d.reportError("lease renewal failed", err)
		return
	}
	d.applyRenewal(items, renewed, sentAt)
}

// renewable lists the held items whose lease is still worth renewing.
func (d *Dispatcher) renewable() []*item {
	d.mu.Lock()
	defer d.mu.Unlock()
	items := make([]*item, 0, len(d.held))
	for _, it := range d.held {
		if !it.lost {
			items = append(items, it)
		}
	}
	return items
}

// applyRenewal moves the local deadline of renewed batches and gives up the
// items the database did not renew (unless their completion is being
// written, which the completer settles).
func (d *Dispatcher) applyRenewal(items []*item, renewed []uuid.UUID, sentAt time.Time) {
	ok := make(map[uuid.UUID]struct{}, len(renewed))
	for _, id := range renewed {
		ok[id] = struct{}{}
	}
	deadline := d.localDeadline(sentAt)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, it := range items {
		if d.held[it.ref()] != it {
			continue
		}
		if _, yes := ok[it.event.ID]; yes {
			if deadline.After(it.batch.deadline) {
				it.batch.deadline = deadline
			}
			continue
		}
		if it.state != itemCompleting {
			d.loseLocked(it)
		}
	}
}

// localDeadline is when this process stops trusting a lease renewed (or
// claimed) at sentAt: the lease duration less a fifth of it, measured from
// before the statement was sent, so that it passes before the database's
// lease_until does.
func (d *Dispatcher) localDeadline(sentAt time.Time) time.Time {
	return sentAt.Add(d.cfg.LeaseDuration - d.cfg.LeaseDuration/5)
}

// onDeadline runs when a batch's local deadline timer fires. If no renewal
// moved the deadline, every item of the batch is lost. An item whose
// outcome is being written stays with the completer, which lets it go
// whatever the database answers (a write that failed is not retried).
func (d *Dispatcher) onDeadline(b *heldBatch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.remaining == 0 {
		return
	}
	if wait := b.deadline.Sub(d.cfg.Test.Now()); wait > 0 {
		b.timer.Reset(wait)
		return
	}
	for _, it := range b.items {
		if d.held[it.ref()] == it && !it.lost {
			d.loseLocked(it)
		}
	}
}

// loseLocked gives up an item whose lease is gone: its context is
// cancelled, and it is let go at once if it never started. A running item
// is let go when its handler returns; a waiting outcome when the completer
// picks it up.
func (d *Dispatcher) loseLocked(it *item) {
	it.lost = true
	if it.cancel != nil {
		it.cancel(outbox.ErrLockLost)
	}
	if it.state == itemQueued {
		d.removeLocked(it)
	}
}

// releaseUnstarted returns the held events whose handler never started to
// PENDING. Called once the dispatcher is stopping, so none can start now.
func (d *Dispatcher) releaseUnstarted() {
	d.mu.Lock()
	var items []*item
	for _, it := range d.held {
		if it.state == itemQueued && !it.lost {
			items = append(items, it)
		}
	}
	d.mu.Unlock()
	ctx, cancel := d.opContext()
	defer cancel()
	if err := d.release(ctx, items); err != nil {
		d.reportError("release at stop failed; the leases will expire and be recovered", err)
		d.removeItems(items)
	}
}
