package dispatcher

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// heartbeatLoop renews every held lease about every third of the lease
// duration, in one round trip per beat.
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

// renew extends the leases of all held events. Each event is credited by
// its own (id, token): the renewal of a newer claim of the same event
// never extends an older, lost one. Events the database did not renew
// are lost: their handlers' contexts are cancelled and their outcomes
// will not be written. Events whose rows were locked elsewhere at that
// moment (busy) are neither: they keep their deadline until the next
// beat. A failed renewal changes nothing locally; the local deadlines
// then decide.
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
	sentAt := d.cfg.now()
	d.leaseWrites.Lock()
	res, err := d.store.Renew(ctx, d.pool, refs, d.cfg.LeaseDuration)
	d.leaseWrites.Unlock()
	if err != nil {
		d.reportError("lease renewal failed", err)
		return
	}
	d.applyRenewal(items, res, sentAt)
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

// applyRenewal moves the local deadline of the renewed items and gives up
// the items the database neither renewed nor reported busy, unless the
// completer holds their outcome: being written, or written before
// although its reply was lost. The completer settles those: a row that
// no longer shows the lease may show the outcome that write recorded.
func (d *Dispatcher) applyRenewal(items []*item, res lease.RefResult, sentAt time.Time) {
	keep := make(map[lease.Ref]bool, len(res.Done)+len(res.Busy))
	for _, r := range res.Done {
		keep[r] = true
	}
	for _, r := range res.Busy {
		keep[r] = false
	}
	deadline := d.localDeadline(sentAt)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, it := range items {
		if d.held[it.ref()] != it {
			continue
		}
		renewed, known := keep[it.ref()]
		switch {
		case renewed:
			it.deadline = later(it.deadline, deadline)
		case !known && !d.completerHolds(it):
			d.loseLocked(it)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// localDeadline is when this process stops trusting a lease renewed (or
// claimed) at sentAt: the lease duration less a fifth of it, measured from
// before the statement was sent, so that it passes before the database's
// lease_until does.
func (d *Dispatcher) localDeadline(sentAt time.Time) time.Time {
	return sentAt.Add(d.cfg.LeaseDuration - d.cfg.LeaseDuration/5)
}

// expired reports whether the item's local deadline has passed. The caller
// holds d.mu.
func (d *Dispatcher) expired(it *item) bool {
	return !d.cfg.now().Before(it.deadline)
}

// onDeadline runs when a batch's deadline timer fires: every held item of
// the batch whose local deadline has passed is lost, and the timer is set
// for the earliest deadline of the rest. Items the completer holds (see
// completerHolds) are left to it: it checks their deadline when a write
// fails.
func (d *Dispatcher) onDeadline(b *heldBatch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var next time.Time
	for _, it := range b.items {
		if d.held[it.ref()] != it || it.lost || d.completerHolds(it) {
			continue
		}
		if d.expired(it) {
			d.loseLocked(it)
			continue
		}
		if next.IsZero() || it.deadline.Before(next) {
			next = it.deadline
		}
	}
	if !next.IsZero() {
		b.timer.Reset(max(next.Sub(d.cfg.now()), time.Millisecond))
	}
}

// completerHolds reports whether the completer decides the fate of an
// item's lease: its outcome is being written, or an earlier write of it
// may have taken effect although its reply was lost (then the row may no
// longer show the lease, and the next try reads what it shows). The
// caller holds d.mu.
func (d *Dispatcher) completerHolds(it *item) bool {
	return it.state == itemCompleting || it.maybeWritten
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
