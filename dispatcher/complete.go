package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

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

// completeLoop writes outcomes as they arrive, until quit closes (see
// writeReady).
func (d *Dispatcher) completeLoop(quit <-chan struct{}) {
	serveLoop(quit, d.held.outcomesReady, func() time.Duration {
		for {
			if wait, wrote := d.writeReady(); !wrote {
				return wait
			}
		}
	})
}

// writeReady writes the outcomes that are ready. It reports whether there
// were any, and how long until the next outcome waiting for a retry is
// ready (0 for none).
func (d *Dispatcher) writeReady() (wait time.Duration, wrote bool) {
	items, dropped, wait := d.held.takeOutcomes(d.writeLimit)
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
	d.writeSplitting(items, &budget)
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

// writeSplitting writes the outcomes of items. When the database refuses
// the write, it splits the items in halves and writes each, so that the
// outcomes it does take are recorded and a refusal is narrowed down to the
// events that cause it, within budget statements.
func (d *Dispatcher) writeSplitting(items []*item, budget *int) {
	*budget--
	err := d.write(items)
	if err == nil {
		return
	}
	if !refused(err) && !unsent(err) {
		d.held.mayHaveWritten(items)
	}
	if len(items) > 1 && (refused(err) || ranOutOfTime(err)) && *budget >= 2 {
		if ranOutOfTime(err) {
			d.writeLimit = max(1, len(items)/2)
		}
		half := len(items) / 2
		d.writeSplitting(items[:half], budget)
		d.writeSplitting(items[half:], budget)
		return
	}
	d.retryLater(items, err)
}

// write writes the outcomes of the items still held: releases, then
// successes and failures in one round trip; then reports them and lets
// their events go.
func (d *Dispatcher) write(items []*item) error {
	items = d.held.owned(items)
	if len(items) == 0 {
		return nil
	}
	ctx, cancel := d.opContext()
	defer cancel()
	releases, params := d.completeParams(items)
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
	d.written(items, res, unknown)
	return nil
}

// params sorts items into those to release and the outcomes to record.
func (d *Dispatcher) completeParams(items []*item) (releases []*item, params lease.CompleteParams) {
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

// retryLater puts the outcomes of a failed write back in line, each due
// again after its own backoff, and lets go of those that failed too often
// or whose lease can no longer be trusted.
func (d *Dispatcher) retryLater(items []*item, err error) {
	isRefusal := refused(err)
	now := time.Now()
	givenUp := d.held.writeFailed(items, func(it *item, expired bool) writeVerdict {
		it.tries++
		if isRefusal {
			it.refusals++
		}
		if expired {
			it.late++
		}
		switch {
		case it.refusals >= maxRefusals || it.tries >= maxWriteTries:
			return writeGiveUp
		case expired && (!it.maybeWritten || it.late > maxLateTries):
			return writeLost
		}
		it.retryAt = now.Add(retryBackoff(it.tries))
		return writeAgain
	})
	d.reportError("completion failed, will retry", err)
	for _, it := range givenUp {
		d.reportGivenUp(it, err)
	}
}

// retryBackoff is how long an outcome waits after its tries-th failed
// write: doubling from firstRetry, at most maxRetryWait.
func retryBackoff(tries int) time.Duration {
	return min(firstRetry<<min(tries-1, 16), maxRetryWait)
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

// written lets go of the items whose outcomes a write recorded (or found
// lost), then reports them: counts, OnOutcome, OnError.
func (d *Dispatcher) written(items []*item, res lease.CompleteResult, unknown []uuid.UUID) {
	byID := itemsByID(items)
	d.held.remove(items)
	if len(res.Retried) > 0 {
		signal(d.retryScheduled)
	}
	d.reportOutcomes(d.dbCtx, byID, res)
	for _, id := range res.Lost {
		d.reportLost(id)
	}
	for _, id := range unknown {
		d.reportUnknown(id, "the write's reply was lost and the row is gone")
	}
}

func itemsByID(items []*item) map[uuid.UUID]*item {
	byID := make(map[uuid.UUID]*item, len(items))
	for _, it := range items {
		byID[it.event.ID] = it
	}
	return byID
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
	d.held.remove(items)
	return nil
}

// releaseTries bounds the tries of a release whose rows are busy.
const releaseTries = 5
