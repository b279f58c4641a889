package complete

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/keeper"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config is what a Completer needs from the dispatcher.
type Config struct {
	// Ctx bounds the Completer's statements and reaches OutcomeFunc: the
	// dispatcher's own, never cancelled (each statement has its own
	// timeout).
	Ctx context.Context
	// Held is the dispatcher's held set: the outcomes to write, and the
	// events to let go.
	Held *held.Set
	// Store and Pool write the outcomes and releases.
	Store *lease.Store
	Pool  *pgxpool.Pool
	// Report counts and reports the outcomes and the errors.
	Report *report.Reporter
	// Clock is the dispatcher's clock; retry times read its real time
	// (Mono), which held.Set.TakeOutcomes compares them with.
	Clock clock.Clock
	// LeaseWrites is the keeper's lock (keeper.Keeper.LeaseWrites): a
	// release never runs beside this dispatcher's renewals and start
	// marks.
	LeaseWrites sync.Locker
	// RetryScheduled is signalled when a write scheduled a retry, or
	// under SignalAllWrites wrote any outcome or release (a key's next
	// event may be its head now): the next due time may have moved (see
	// the coordinator).
	RetryScheduled chan struct{}
	// SignalAllWrites is true under Ordering PerKey: every written
	// outcome or release signals RetryScheduled, not only a retry.
	SignalAllWrites bool
	// CompletedFunc notes the end of an outcome write (Health).
	CompletedFunc func(err error)
	// SettledFunc notes that no outcome is left failing (Health).
	SettledFunc func()
	// OutcomeFunc receives each outcome recorded (the dispatcher's
	// OnOutcome); nil for none.
	OutcomeFunc func(ctx context.Context, o Outcome)
	// OpTimeout bounds each statement.
	OpTimeout time.Duration
	// DeleteSent, AtMostOnce (Delivery AtMostOnce), MaxAttempts and
	// Backoff are the dispatcher's: how outcomes are written.
	DeleteSent  bool
	AtMostOnce  bool
	MaxAttempts int
	Backoff     outbox.Backoff
	// UnroutableMinDelay and UnroutableMaxDelay bound the back-off of a
	// release of an event the dispatcher could not route (see
	// lease.Store.ReleaseLater).
	UnroutableMinDelay, UnroutableMaxDelay time.Duration
}

// Completer is the one goroutine that writes outcomes (see Run): it takes
// the outcomes the held set collected, writes them in one fenced round
// trip (releases first), reports them, and lets their events go. Only one
// Completer runs per dispatcher, so that no two Completes of the same
// tokens ever wait on each other (see internal/lease, "Locks and
// deadlocks").
//
// While one write is in flight the next outcomes gather, so under load
// each statement carries a batch (group commit) and when idle each
// outcome is written at once. A write the database refuses is split in
// halves until the outcomes that cause it are isolated; an outcome whose
// write failed waits for its own retry time (a backoff that a stop
// interrupts: Run returns at once when quit ends) and the others do not
// wait for it.
type Completer struct {
	cfg Config
	// writeLimit bounds the outcomes of one write after writes ran out of
	// time (0: no bound). Run's goroutine only.
	writeLimit int
	// writes counts the writes that ran (tests read it). Run's goroutine
	// only.
	writes int
}

// New returns a Completer of cfg, not running yet.
func New(cfg Config) *Completer { return &Completer{cfg: cfg} }

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
	// maxUnsplit is how many refused writes of several, left whole by a
	// round's budget, an outcome shares before it is written alone
	// (writeSuspects), and maxAlonePerRound how many such outcomes a round
	// writes alone at most.
	maxUnsplit       = 2
	maxAlonePerRound = maxWritesPerRound / 2
)

// maxLateTries bounds the failed writes, past the local deadline, of an
// outcome whose earlier write may have taken effect: past the deadline only
// reading the row back can still tell (the fence refuses the write itself),
// and a database that does not answer ends it.
const maxLateTries = 2

// Run writes outcomes as they arrive, until quit ends.
func (c *Completer) Run(quit context.Context) {
	c.cfg.Clock.Serve(quit, c.cfg.Held.OutcomesReady(), func() time.Duration {
		for {
			if wait, wrote := c.writeReady(); !wrote {
				return wait
			}
		}
	})
}

// writeReady writes the outcomes that are ready. It reports whether there
// were any, and how long until the next outcome waiting for a retry is
// ready (0 for none).
func (c *Completer) writeReady() (wait time.Duration, wrote bool) {
	items, dropped, wait := c.cfg.Held.TakeOutcomes(c.writeLimit)
	for _, it := range dropped {
		if it.MaybeWritten() {
			c.cfg.Report.Unknown(it.Event.ID, "the write's reply was lost and the lease ran out before a retry got through")
		} else {
			c.cfg.Report.Lost(it.Event.ID)
		}
	}
	if len(items) == 0 {
		if wait == 0 {
			c.cfg.SettledFunc() // no outcome is left failing
		}
		return wait, len(dropped) > 0
	}
	c.writeTaken(items)
	return wait, true
}

// writeTaken writes the outcomes of one round, taken from the held set:
// up to maxAlonePerRound suspects alone, then the others, splitting
// refused writes within the round's budget: at most maxAlonePerRound +
// maxWritesPerRound statements, and one more for each level of a split
// that the budget cut short.
func (c *Completer) writeTaken(items []*held.Item) {
	limit := c.writeLimit
	rest := c.writeSuspects(items)
	budget := maxWritesPerRound
	c.writeSplitting(rest, &budget)
	if c.writeLimit == limit && limit > 0 && len(items) == limit {
		c.writeLimit = 2 * limit // a full write went through: grow back
		if c.writeLimit > maxWriteLimit {
			c.writeLimit = 0
		}
	}
}

// writeSuspects writes alone, each in a statement of its own, up to
// maxAlonePerRound of the outcomes that were in maxUnsplit or more
// refused writes of several that a round left whole, those left whole
// most often first, and returns the others. Without it a group left whole
// went back behind the outcomes that arrived meanwhile; while refused
// ones kept arriving, each round spent its budget splitting the newcomers
// and the old group was written whole again, for ever, its leases renewed
// by the heartbeat. Written alone, an outcome is recorded or refused
// alone, which counts (maxRefusals); the suspects not written alone this
// round are left whole again, so they come first in a later one: every
// outcome is settled, and a round never spends more than
// maxAlonePerRound statements on them.
func (c *Completer) writeSuspects(items []*held.Item) (rest []*held.Item) {
	var suspects []*held.Item
	for _, it := range items {
		if it.Record().Unsplit >= maxUnsplit {
			suspects = append(suspects, it)
		} else {
			rest = append(rest, it)
		}
	}
	slices.SortStableFunc(suspects, func(a, b *held.Item) int { return b.Record().Unsplit - a.Record().Unsplit })
	for i, it := range suspects {
		if i >= maxAlonePerRound {
			return append(rest, suspects[i:]...)
		}
		alone := 1
		c.writeSplitting([]*held.Item{it}, &alone)
	}
	return rest
}

// maxWriteLimit is the write size past which the completer stops bounding
// its writes again, after statement timeouts made it shrink them.
const maxWriteLimit = 1 << 16

// writeSplitting writes the outcomes of items. When the database refuses
// the write, it splits the items in halves and writes each, so that the
// outcomes it does take are recorded and a refusal is narrowed down to the
// events that cause it, within budget statements.
func (c *Completer) writeSplitting(items []*held.Item, budget *int) {
	*budget--
	ran, err := c.write(items)
	if ran && !(Refused(err) && len(items) == 1) {
		c.cfg.CompletedFunc(err) // one event's refused outcome says nothing of the dispatcher
	}
	if err == nil {
		return
	}
	if !Refused(err) && !unsent(err) {
		c.cfg.Held.MayHaveWritten(items)
	}
	if len(items) > 1 && (Refused(err) || pgerr.RanOutOfTime(err)) && *budget >= 2 {
		if pgerr.RanOutOfTime(err) {
			c.writeLimit = max(1, len(items)/2)
		}
		half := len(items) / 2
		c.writeSplitting(items[:half], budget)
		c.writeSplitting(items[half:], budget)
		return
	}
	c.retryLater(items, err)
}

// write writes the outcomes of the items still held: releases, then
// successes and failures in one round trip; then reports them and lets
// their events go. ran is false when none was held any more (no
// statement ran).
func (c *Completer) write(items []*held.Item) (ran bool, err error) {
	items = c.cfg.Held.Owned(items)
	if len(items) == 0 {
		return false, nil
	}
	c.writes++
	ctx, cancel := c.opContext()
	defer cancel()
	releases, params := c.Params(items)
	if err := c.release(ctx, releases); err != nil {
		return true, err
	}
	res, err := c.cfg.Store.Complete(ctx, c.cfg.Pool, params)
	if err != nil {
		return true, err
	}
	unknown, err := c.settleLost(ctx, items, &res)
	if err != nil {
		return true, err
	}
	c.written(items, res, unknown)
	return true, nil
}

// opContext bounds one statement of the completer.
func (c *Completer) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.cfg.Ctx, c.cfg.OpTimeout)
}

// Params sorts items into those to release and the outcomes to record
// (the parameters of the write's lease.Store.Complete). Only the
// completer's goroutine may call it (it decides each failure to write
// once, see failureToWrite), or a benchmark while the completer does not
// run.
func (c *Completer) Params(items []*held.Item) (releases []*held.Item, params lease.CompleteParams) {
	params.DeleteSent = c.cfg.DeleteSent
	params.StatementTimeout = c.cfg.OpTimeout
	params.Sent = make([]lease.Ref, 0, len(items)) // most outcomes are successes: one allocation, not one per doubling
	for _, it := range items {
		switch {
		case it.Result().Release:
			releases = append(releases, it)
		case it.Result().Err == nil:
			params.Sent = append(params.Sent, it.Ref())
		default:
			params.Failed = append(params.Failed, c.failureToWrite(it))
		}
	}
	return releases, params
}

// failureToWrite is the failure the completer writes for it, decided
// (see failure) at its first write and kept: every write of an outcome is
// the same write (a jittered backoff is drawn once), so that a write
// retried after its reply was lost can tell the time the earlier one set
// (see lease.Store.Outcomes). The completer's goroutine only.
func (c *Completer) failureToWrite(it *held.Item) lease.Failure {
	if r := it.Record(); !r.Decided {
		r.Failure, r.Decided = c.failure(it), true
	}
	return it.Record().Failure
}

// Final reports whether the failed attempt that it finished with would be
// written final (FAILED) rather than retried: under AtMostOnce, for a
// permanent error, at the snooze limit, or at MaxAttempts. False for a
// snooze.
func (c *Completer) Final(it *held.Item) bool { return c.failure(it).Final }

// failure decides whether a failed attempt is final and when to retry,
// or records the snooze a handler asked for.
func (c *Completer) failure(it *held.Item) lease.Failure {
	r := it.Result()
	if r.Snooze {
		return lease.Failure{Ref: it.Ref(), Snooze: true, Delay: r.Delay}
	}
	final := c.cfg.AtMostOnce || outbox.IsPermanent(r.Err) ||
		r.Code == outbox.CodeSnoozeLimit || it.Event.Attempt >= c.cfg.MaxAttempts
	return lease.Failure{
		Ref: it.Ref(), Code: r.Code, Message: r.Err.Error(), Final: final,
		Delay: c.cfg.Backoff.Delay(it.Event.Attempt),
	}
}

// Release returns held items that never started to PENDING, uncharged,
// as the completer releases (see release). When the release fails it
// reports failed and lets them go all the same: their leases expire and
// recovery returns them. Any goroutine may call it.
func (c *Completer) Release(items []*held.Item, failed string) {
	ctx, cancel := c.opContext()
	defer cancel()
	if err := c.release(ctx, items); err != nil {
		c.cfg.Report.Error(failed, err)
		c.cfg.Held.Remove(items)
	}
}

// release returns items to PENDING without spending an attempt. It never
// runs beside this dispatcher's own renewals and start marks (LeaseWrites),
// so a row is busy only when a third party holds it; such a row is tried
// again up to keeper.BusyTries times, then let go all the same: its lease
// expires and recovery returns it (counting a recovery if the claim had
// marked it started).
//
// Items the dispatcher could not route are released with a back-off
// (see dispatcher/unroutable.go), the others due as they were.
func (c *Completer) release(ctx context.Context, items []*held.Item) error {
	var now, later []*held.Item
	for _, it := range items {
		if it.Result().Unroutable {
			later = append(later, it)
		} else {
			now = append(now, it)
		}
	}
	if err := c.releaseWith(ctx, now, c.cfg.Store.Release); err != nil {
		return err
	}
	return c.releaseWith(ctx, later, func(ctx context.Context, db lease.DB, refs []lease.Ref) (lease.RefResult, error) {
		return c.cfg.Store.ReleaseLater(ctx, db, refs, c.cfg.UnroutableMinDelay, c.cfg.UnroutableMaxDelay)
	})
}

// releaseWith is release with the statement send.
func (c *Completer) releaseWith(ctx context.Context, items []*held.Item,
	send func(ctx context.Context, db lease.DB, refs []lease.Ref) (lease.RefResult, error)) error {
	if len(items) == 0 {
		return nil
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.Ref()
	}
	for try := 1; len(refs) > 0; try++ {
		c.cfg.LeaseWrites.Lock()
		res, err := send(ctx, c.cfg.Pool, refs)
		c.cfg.LeaseWrites.Unlock()
		if err != nil {
			return err
		}
		c.cfg.Report.Counters.Released.Add(uint64(len(res.Done)))
		if c.cfg.SignalAllWrites && len(res.Done) > 0 {
			signal(c.cfg.RetryScheduled) // a released head is due again
		}
		if refs = res.Busy; try == keeper.BusyTries || len(refs) == 0 || c.cfg.Clock.Sleep(ctx, keeper.BusyRetry) != nil {
			break
		}
	}
	c.cfg.Held.Remove(items)
	return nil
}

// settleLost looks again at the rows a completion found no longer held
// whose earlier write may have taken effect although its reply was lost:
// an outcome this very claim wrote is its own, not a lost lease, even when
// another replica claimed, or completed, the event since. It reads them
// back in one round trip and sorts them by the decision table of
// internal/lease ("Lost replies"): those it recorded move from res.Lost to
// the lists they belong in, those whose rows prove they were not recorded
// (the lease was lost first) stay lost, and it returns those the rows can
// no longer tell about (reported as outbox.ErrOutcomeUnknown, never as a
// lost lease).
func (c *Completer) settleLost(ctx context.Context, items []*held.Item, res *lease.CompleteResult) ([]lease.Unknown, error) {
	if len(res.Lost) == 0 {
		return nil, nil
	}
	byID := itemsByID(items)
	again := lease.CompleteParams{DeleteSent: c.cfg.DeleteSent}
	var lost []uuid.UUID
	for _, id := range res.Lost {
		switch it := byID[id]; {
		case !it.MaybeWritten():
			lost = append(lost, id)
		case it.Result().Err == nil:
			again.Sent = append(again.Sent, it.Ref())
		default:
			again.Failed = append(again.Failed, c.failureToWrite(it))
		}
	}
	if len(again.Sent)+len(again.Failed) == 0 {
		return nil, nil
	}
	own, unknown, err := c.cfg.Store.Outcomes(ctx, c.cfg.Pool, again)
	if err != nil {
		return nil, err
	}
	res.Sent = append(res.Sent, own.Sent...)
	res.Retried = append(res.Retried, own.Retried...)
	res.Failed = append(res.Failed, own.Failed...)
	res.Lost = append(lost, own.Lost...)
	return unknown, nil
}

// written lets go of the items whose outcomes a write recorded (or found
// lost), then reports them: counts, OutcomeFunc, OnError.
func (c *Completer) written(items []*held.Item, res lease.CompleteResult, unknown []lease.Unknown) {
	byID := itemsByID(items)
	c.cfg.Held.Remove(items)
	if len(res.Retried) > 0 || c.cfg.SignalAllWrites && len(res.Sent)+len(res.Failed) > 0 {
		signal(c.cfg.RetryScheduled) // under PerKey a sent or failed head may let its key's next event go
	}
	c.reportOutcomes(byID, res)
	for _, id := range res.Lost {
		c.cfg.Report.Lost(id)
	}
	for _, u := range unknown {
		c.cfg.Report.Unknown(u.ID, "the write's reply was lost and "+u.Why)
	}
}

func itemsByID(items []*held.Item) map[uuid.UUID]*held.Item {
	byID := make(map[uuid.UUID]*held.Item, len(items))
	for _, it := range items {
		byID[it.Event.ID] = it
	}
	return byID
}

// retryLater puts the outcomes of a failed write back in line, each due
// again after its own backoff, and lets go of those that failed too often
// or whose lease can no longer be trusted. A refusal counts against an
// outcome only when it was written alone: a refused write of several that
// the round's budget left unsplit says nothing about each of them, spends
// none of their tries and is written again after firstRetry, when the
// next round splits it further; an outcome left whole maxUnsplit times is
// then written alone (writeSuspects), so that refused outcomes arriving
// all the time cannot keep it from being settled.
func (c *Completer) retryLater(items []*held.Item, err error) {
	alone := Refused(err) && len(items) == 1
	group := Refused(err) && len(items) > 1
	now := c.cfg.Clock.Mono()
	givenUp := c.cfg.Held.WriteFailed(items, func(it *held.Item, expired bool) held.WriteVerdict {
		r := it.Record()
		if group {
			r.Unsplit++
		} else {
			r.Tries++
		}
		if alone {
			r.Refusals++
		}
		if expired {
			r.Late++
		}
		switch {
		case r.Refusals >= maxRefusals || r.Tries >= maxWriteTries:
			return held.WriteGiveUp
		case expired && (!it.MaybeWritten() || r.Late > maxLateTries):
			return held.WriteLost
		}
		r.RetryAt = now.Add(retryBackoff(max(r.Tries, 1)))
		return held.WriteAgain
	})
	c.cfg.Report.Error("completion failed, will retry", err)
	for _, it := range givenUp {
		if !c.recordRefused(it, err) {
			c.reportGivenUp(it, err)
		}
	}
}

// retryBackoff is how long an outcome waits after its tries-th failed
// write: doubling from firstRetry, at most maxRetryWait.
func retryBackoff(tries int) time.Duration {
	return min(firstRetry<<min(tries-1, 16), maxRetryWait)
}

// signal does a non-blocking send on a coalescing channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
