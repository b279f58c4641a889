package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/lease"
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
	if !it.startedAt.IsZero() {
		it.ran = time.Since(it.startedAt)
	}
	d.pending = append(d.pending, it)
	d.mu.Unlock()
	signal(d.flush)
}

// The completer's retry policy for a write the database did not take.
const (
	// maxRefusals is how many times the database may refuse the write of
	// one event's outcome (an SQL error that retrying the same write will
	// not fix) before the dispatcher lets go of the event.
	maxRefusals = 5
	// maxWriteTries bounds the failed writes of one outcome for any cause;
	// a database that does not answer also ends it at the local deadline.
	maxWriteTries = 20
	// firstRetry and maxRetryWait shape the backoff between tries of one
	// outcome: doubling from firstRetry, at most maxRetryWait.
	firstRetry   = 100 * time.Millisecond
	maxRetryWait = 2 * time.Second
	// maxWritesPerRound bounds the statements one round spends splitting a
	// refused write to find the outcomes that cause it.
	maxWritesPerRound = 64
)

// maxLateTries bounds the failed writes, past the local deadline, of an
// outcome whose earlier write may have taken effect: past the deadline only
// reading the row back can still tell (the fence refuses the write itself),
// and a database that does not answer ends it.
const maxLateTries = 2

// completeLoop writes outcomes as they arrive. While one write is in
// flight the next outcomes gather, so under load each statement carries a
// batch (group commit) and when idle each outcome is written at once. An
// outcome whose write failed waits for its own retry time; the others do
// not wait for it.
func (d *Dispatcher) completeLoop(quit <-chan struct{}) {
	serveLoop(quit, d.flush, func() time.Duration {
		for {
			if wait, wrote := d.completeOnce(); !wrote {
				return wait
			}
		}
	})
}

// serveLoop is the loop of a background writer (the completer, the
// marker): until quit, it runs once on each signal, and again when the
// wait once returned (0: none) has passed.
func serveLoop(quit, signal <-chan struct{}, once func() (wait time.Duration)) {
	retry := stoppedTimer()
	defer retry.Stop()
	for {
		select {
		case <-quit:
			return
		case <-signal:
		case <-retry.C:
		}
		if wait := once(); wait > 0 {
			retry.Reset(wait)
		}
	}
}

// completeOnce writes the outcomes that are ready. It reports whether
// there were any, and how long until the next outcome waiting for a retry
// is ready (0 for none).
func (d *Dispatcher) completeOnce() (wait time.Duration, wrote bool) {
	items, dropped, wait := d.takePending()
	for _, it := range dropped {
		if it.maybeWritten {
			d.reportUnknown(it.event.ID, "the write's reply was lost and the lease ran out before a retry got through")
		} else {
			d.reportLost(it.event.ID)
		}
	}
	if len(items) == 0 {
		return wait, len(dropped) > 0
	}
	limit := d.writeLimit
	budget := maxWritesPerRound
	d.writeParts(items, &budget)
	if d.writeLimit == limit && limit > 0 && len(items) == limit {
		d.writeLimit = 2 * limit // a full write went through: grow back
		if d.writeLimit > maxWriteLimit {
			d.writeLimit = 0
		}
	}
	return wait, true
}

// maxWriteLimit is the write size past which the completer stops bounding
// its writes again, after statement timeouts made it shrink them.
const maxWriteLimit = 1 << 16

// takePending moves the outcomes that are ready to completing, drops those
// whose lease was lost, and leaves those waiting for a retry. It returns
// the time until the earliest of those is ready.
func (d *Dispatcher) takePending() (items, dropped []*item, wait time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var later []*item
	for _, it := range d.pending {
		switch {
		case it.lost:
			d.removeLocked(it)
			dropped = append(dropped, it)
		case it.retryAt.After(now):
			later = append(later, it)
			if w := it.retryAt.Sub(now); wait == 0 || w < wait {
				wait = w
			}
		case d.writeLimit > 0 && len(items) >= d.writeLimit:
			later = append(later, it) // the next round takes it
		default:
			it.state = itemCompleting
			items = append(items, it)
		}
	}
	d.pending = later
	return items, dropped, wait
}

// writeParts writes the outcomes of items. When the database refuses the
// write, it splits the items in halves and writes each, so that the
// outcomes it does take are recorded and a refusal is narrowed down to the
// events that cause it, within budget statements.
func (d *Dispatcher) writeParts(items []*item, budget *int) {
	*budget--
	err := d.complete(items)
	if err == nil {
		return
	}
	if !refused(err) && !unsent(err) {
		d.mayHaveWritten(items)
	}
	if len(items) > 1 && (refused(err) || ranOutOfTime(err)) && *budget >= 2 {
		if ranOutOfTime(err) {
			d.writeLimit = max(1, len(items)/2)
		}
		half := len(items) / 2
		d.writeParts(items[:half], budget)
		d.writeParts(items[half:], budget)
		return
	}
	d.retryLater(items, err)
}

// mayHaveWritten notes that a write of items may have taken effect
// although it reported an error (its reply was lost, or it timed out), so
// that the next write reads back what the rows show.
func (d *Dispatcher) mayHaveWritten(items []*item) {
	d.mu.Lock()
	for _, it := range items {
		it.maybeWritten = true
	}
	d.mu.Unlock()
}

// refused reports whether err is the database refusing a statement (an
// SQL error that the same statement would meet again), rather than a
// failure that says nothing about the statement: a lost or broken
// connection, a timeout or cancellation, a deadlock or serialization
// failure, lack of resources, a shutdown, or a read-only server.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "25", "40", "53", "55", "57", "58":
		return false
	}
	return true
}

// unsent reports whether err shows that a write never reached the
// database (no connection could be made, or pgx sent nothing), so that it
// cannot have taken effect.
func unsent(err error) bool {
	var connectErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr)
}

// retryLater puts the outcomes of a failed write back in line, each due
// again after its own backoff, and lets go of those that failed too often
// or whose lease can no longer be trusted.
func (d *Dispatcher) retryLater(items []*item, err error) {
	isRefusal := refused(err)
	var refusedItems []*item
	d.mu.Lock()
	now := time.Now()
	for _, it := range items {
		if d.held[it.ref()] != it {
			continue
		}
		it.tries++
		if isRefusal {
			it.refusals++
		}
		if d.expired(it) {
			it.late++
		}
		switch {
		case it.refusals >= maxRefusals || it.tries >= maxWriteTries:
			d.removeLocked(it)
			refusedItems = append(refusedItems, it)
		case d.expired(it) && (!it.maybeWritten || it.late > maxLateTries):
			d.loseLocked(it)
			it.state = itemDone
			d.pending = append(d.pending, it)
		default:
			it.state = itemDone
			it.retryAt = now.Add(min(firstRetry<<(it.tries-1), maxRetryWait))
			d.pending = append(d.pending, it)
		}
	}
	d.mu.Unlock()
	signal(d.flush)
	d.reportError("completion failed, will retry", err)
	for _, it := range refusedItems {
		d.reportGivenUp(it, err)
	}
}

// reportGivenUp logs, at ERROR, an event whose outcome the completer gave
// up writing, and reports it to OnError: matching outbox.ErrOutcomeRefused
// when the database kept refusing it, outbox.ErrOutcomeUnknown when an
// earlier write of it may have taken effect, else outbox.ErrLockLost (the
// row was not changed). Its lease expires and recovery returns it to
// PENDING.
func (d *Dispatcher) reportGivenUp(it *item, err error) {
	cause := outbox.ErrLockLost
	switch {
	case it.refusals >= maxRefusals:
		cause = outbox.ErrOutcomeRefused
	case it.maybeWritten:
		cause = outbox.ErrOutcomeUnknown
		d.stats.outcomeUnknown.Add(1)
	default:
		d.stats.lockLost.Add(1)
	}
	d.stats.errors.Add(1)
	d.cfg.Logger.Error("pgoutbox: gave up writing an outcome; the event's lease will expire and be recovered",
		"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "event_id", it.event.ID.String(),
		"event_type", it.event.Type, "tries", it.tries, "refusals", it.refusals, "error", err)
	if d.cfg.OnError != nil {
		d.cfg.OnError(fmt.Errorf("event %s: %w: %w", it.event.ID, cause, err))
	}
}

// complete writes the outcomes of the items still held: releases, then
// successes and failures in one round trip.
func (d *Dispatcher) complete(items []*item) error {
	items = d.stillOwned(items)
	if len(items) == 0 {
		return nil
	}
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
	unknown, err := d.settleLost(ctx, items, &res)
	if err != nil {
		return err
	}
	d.applyComplete(items, res, unknown)
	return nil
}

// stillOwned drops the items this process no longer holds (let go by an
// earlier part of the same round).
func (d *Dispatcher) stillOwned(items []*item) []*item {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := items[:0:0]
	for _, it := range items {
		if d.held[it.ref()] == it {
			kept = append(kept, it)
		}
	}
	return kept
}

// settleLost looks again at the rows a completion found no longer held
// whose earlier write may have taken effect although its reply was lost:
// an outcome this very claim wrote is its own, not a lost lease. It moves
// those from res.Lost to the lists they belong in, and returns the ids
// whose outcome cannot be known (a success under DeleteSent whose row is
// gone).
func (d *Dispatcher) settleLost(ctx context.Context, items []*item, res *lease.CompleteResult) ([]uuid.UUID, error) {
	if len(res.Lost) == 0 {
		return nil, nil
	}
	byID := itemsByID(items)
	var again []lease.Ref
	var lost []uuid.UUID
	for _, id := range res.Lost {
		if it := byID[id]; it.maybeWritten {
			again = append(again, it.ref())
		} else {
			lost = append(lost, id)
		}
	}
	if len(again) == 0 {
		return nil, nil
	}
	own, gone, err := d.store.Outcomes(ctx, d.pool, again)
	if err != nil {
		return nil, err
	}
	res.Sent = append(res.Sent, own.Sent...)
	res.Retried = append(res.Retried, own.Retried...)
	res.Failed = append(res.Failed, own.Failed...)
	res.Lost = append(lost, own.Lost...)
	var unknown []uuid.UUID
	for _, id := range gone {
		if it := byID[id]; d.cfg.DeleteSent && it.result.err == nil && !it.result.release {
			unknown = append(unknown, id)
		} else {
			res.Lost = append(res.Lost, id)
		}
	}
	return unknown, nil
}

func itemsByID(items []*item) map[uuid.UUID]*item {
	byID := make(map[uuid.UUID]*item, len(items))
	for _, it := range items {
		byID[it.event.ID] = it
	}
	return byID
}

// outcomes sorts items into those to release and the outcomes to record.
func (d *Dispatcher) outcomes(items []*item) (releases []*item, params lease.CompleteParams) {
	params.DeleteSent = d.cfg.DeleteSent
	params.StatementTimeout = opTimeout(d.cfg.LeaseDuration)
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

// failure decides whether a failed attempt is final and when to retry,
// or records the snooze a handler asked for.
func (d *Dispatcher) failure(it *item) lease.Failure {
	r := it.result
	if r.snooze {
		return lease.Failure{Ref: it.ref(), Snooze: true, Delay: r.delay}
	}
	final := d.cfg.Delivery == AtMostOnce || outbox.IsPermanent(r.err) ||
		r.code == outbox.CodeNoHandler || r.code == outbox.CodeSnoozeLimit || it.event.Attempt >= d.cfg.MaxAttempts
	return lease.Failure{
		Ref: it.ref(), Code: r.code, Message: r.err.Error(), Final: final,
		Delay: d.cfg.Backoff.Delay(it.event.Attempt),
	}
}

// applyComplete lets go of completed items, fires hooks and counts.
func (d *Dispatcher) applyComplete(items []*item, res lease.CompleteResult, unknown []uuid.UUID) {
	byID := itemsByID(items)
	d.removeItems(items)
	if len(res.Retried) > 0 {
		signal(d.retried)
	}
	d.reportOutcomes(byID, res)
	for _, id := range res.Lost {
		d.reportLost(id)
	}
	for _, id := range unknown {
		d.reportUnknown(id, "the write's reply was lost and the row is gone")
	}
}

// release returns items to PENDING without spending an attempt. It never
// runs beside this dispatcher's own renewals and start marks (leaseWrites),
// so a row is busy only when a third party holds it; such a row is tried
// again up to releaseTries times, then let go all the same: its lease
// expires and recovery returns it (counting a recovery if the claim had
// marked it started).
func (d *Dispatcher) release(ctx context.Context, items []*item) error {
	if len(items) == 0 {
		return nil
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.ref()
	}
	for try := 1; len(refs) > 0; try++ {
		d.leaseWrites.Lock()
		res, err := d.store.Release(ctx, d.pool, refs)
		d.leaseWrites.Unlock()
		if err != nil {
			return err
		}
		d.stats.released.Add(uint64(len(res.Done)))
		if refs = res.Busy; try == releaseTries || len(refs) == 0 || !sleep(ctx, busyRetry) {
			break
		}
	}
	d.removeItems(items)
	return nil
}

// releaseTries bounds the tries of a release whose rows are busy.
const releaseTries = 5

// reportUnknown counts and reports an outcome that may or may not have
// been recorded: an earlier write of it may have taken effect, and why
// that cannot be known.
func (d *Dispatcher) reportUnknown(id uuid.UUID, why string) {
	d.stats.outcomeUnknown.Add(1)
	d.reportError("outcome unknown", fmt.Errorf("event %s: %w: %s", id, outbox.ErrOutcomeUnknown, why))
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
		if b.stopTimeout != nil {
			b.stopTimeout()
		}
	}
	if d.stopping && len(d.held) == 0 {
		close(d.idle)
	}
	signal(d.capacity)
}
