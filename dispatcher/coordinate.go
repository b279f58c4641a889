package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
	"github.com/pgoutbox/pgoutbox/internal/waker"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// coordinate is the one loop that decides when to claim: at start, on every
// poll, on a trigger (manual or a notification) and its follow-ups (see
// waker.Waker), when slots free up while a backlog remains, when a claim comes
// back full, and (while wake-ups work) when the next retry becomes due. Up
// to Claimers claims run at once.
// Polls recover expired leases every RecoverEvery-th time. It returns when
// ctx ends or Stop is called, once no claim is in flight.
func (d *Dispatcher) coordinate(ctx context.Context) {
	// Recoveries run in this loop: a stop must end one that waits for the
	// database (it rolls back, and the next dispatcher does it).
	stopCtx, cancel := d.life.untilStop(ctx)
	defer cancel()
	p := newPoller(d.cfg)
	defer p.stop()
	d.fixClaimedTypes()
	c := newClaims(d)
	defer c.wait()
	wakeTimer := stoppedTimer()
	defer wakeTimer.Stop()
	w := waker.New(waker.Config{Cooldown: d.cfg.WakeupCooldown, BatchSize: d.cfg.BatchSize, ArmFunc: func(wait time.Duration) { wakeTimer.Reset(wait) },
		FollowUpsOver: d.cfg.onFollowUpsOver})
	if ctx.Err() != nil || d.life.stopRequested() {
		return
	}
	c.wake()
	for {
		if ctx.Err() != nil || d.life.stopRequested() {
			return // before any other ready case: a stop is never put off
		}
		select {
		case <-ctx.Done():
			return
		case <-d.life.stopCh:
			return
		case <-p.poll.C:
			d.pollCycle(stopCtx, p)
			c.wake()
			p.next(d.wakeupsActive.Load(), d.report.Counters.Claimed.Load())
		case <-d.trigger:
			if w.Wakeup(time.Now(), c.inflight > 0) {
				c.wake()
			}
		case <-wakeTimer.C:
			if w.Fired(time.Now(), c.inflight > 0) {
				c.wake()
			}
		case <-d.held.Freed():
			c.roomFreed()
		case <-d.retryScheduled:
			switch {
			case d.mode.WakeOnRetry():
				// An outcome or release of a key's event was written: the
				// key's next event may be its head now. Claim at once,
				// wake-ups or not; a claim that finds nothing settles and
				// arms the due timer as any other.
				c.wake()
			case c.settled():
				d.armDue(p)
			}
		case <-p.due.C:
			d.report.Counters.DueWakeups.Add(1)
			c.wake()
		case <-c.retry.C:
			c.retryNow()
		case r := <-c.results:
			if r.got > 0 {
				p.unstretch()
			}
			settled := c.finished(r)
			if w.Finished(time.Now(), r.got, c.inflight > 0) {
				c.wake()
				settled = false
			}
			if settled {
				d.armDue(p)
			}
		}
		d.report.Counters.PollInterval.Store(int64(p.interval))
	}
}

// poller holds the poll timer, whose interval stretches (up to
// IdlePollInterval, by default not at all) while the table is idle and
// wake-ups work, and the timer that fires when the next retry is due.
type poller struct {
	cfg           Config
	interval      time.Duration
	poll, due     *time.Timer
	lastClaimed   uint64
	lastRecovered time.Time
	// recoverLimit bounds one recovery statement: halved by each that
	// runs out of time, doubled back by each full one, up to
	// RecoverBatchSize.
	recoverLimit int
	// recoverBacklog is set when the last recovery pass ended with a full
	// statement: expired leases remain, and the next poll, recoverGap
	// later, recovers again.
	recoverBacklog bool
}

func newPoller(cfg Config) *poller {
	return &poller{
		cfg: cfg, interval: cfg.PollInterval, poll: time.NewTimer(cfg.PollInterval),
		due: stoppedTimer(), lastRecovered: time.Now(),
		recoverLimit: cfg.RecoverBatchSize,
	}
}

func (p *poller) stop() {
	p.poll.Stop()
	p.due.Stop()
}

// next sets the interval of the next poll: doubled (up to IdlePollInterval)
// when wake-ups work and nothing was claimed since the last poll, else
// PollInterval. With IdlePollInterval at its default, PollInterval, polls
// stay PollInterval apart: an event that no wake-up announced (an emitter's
// NotifyInterval skipped its notify, and the notify it relied on rolled
// back, is still open, or came long before its commit) is then claimed
// within PollInterval of its commit. The dispatcher cannot tell such
// events from none, so no stretch keeps that bound.
func (p *poller) next(wakeups bool, claimed uint64) {
	if wakeups && claimed == p.lastClaimed {
		p.interval = min(2*p.interval, p.cfg.IdlePollInterval)
	} else {
		p.interval = p.cfg.PollInterval
	}
	p.lastClaimed = claimed
	wait := p.interval
	if p.recoverBacklog {
		// Expired leases remain: recover again soon, leaving the
		// coordinator free for claims and wake-ups in between.
		wait = min(wait, p.cfg.recoverGap())
	}
	p.poll.Reset(wait)
}

// unstretch brings a stretched poll back to PollInterval once claims find
// events again, so that an event that no wake-up announced (a missed
// notification, or one an emitter's NotifyInterval skipped) waits at most
// PollInterval while the table is busy.
func (p *poller) unstretch() {
	if p.interval > p.cfg.PollInterval {
		p.interval = p.cfg.PollInterval
		p.poll.Reset(p.interval)
	}
}

// recoverDue reports whether this poll should recover expired leases: every
// RecoverEvery-th poll, when RecoverEvery plain poll intervals have
// passed (so that stretched polls do not delay recovery), or when the
// last pass left expired leases behind.
func (p *poller) recoverDue(n uint64) bool {
	if p.recoverBacklog || n%uint64(p.cfg.RecoverEvery) == 0 || time.Since(p.lastRecovered) >= time.Duration(p.cfg.RecoverEvery)*p.cfg.PollInterval {
		p.lastRecovered = time.Now()
		return true
	}
	return false
}

// pollCycle counts a poll; when it is time it recovers expired leases
// (of every type: a crashed replica's leases are taken back by whichever
// replica recovers first, and then claimed by one that claims their type)
// and counts the events of types this dispatcher does not claim; and it
// logs the counts of repeated log lines held back.
func (d *Dispatcher) pollCycle(ctx context.Context, p *poller) {
	n := d.report.Counters.PollCycles.Add(1)
	d.report.Counters.LastPoll.Store(time.Now().UnixNano())
	if p.recoverDue(n) {
		d.recoverLeases(ctx, p, n)
		d.checkWaiting(ctx)
	}
	d.report.FlushRepeats()
}

// armDue sets the due timer to the next PENDING event's next_attempt_at
// (of a type it claims)
// (database clock), when that comes before the next poll; when an event is
// due already (a short backoff, or one that became due while the
// coordinator was busy) it triggers a claim instead. It runs once claims
// have settled with no backlog, only while wake-ups work: then polls may be
// far apart (stretched), and retries and delayed events must still run on
// time.
func (d *Dispatcher) armDue(p *poller) {
	if !d.wakeupsActive.Load() {
		return
	}
	types, ok := d.circuit.DueTypes(d.kinds.circuitTypes())
	if !ok {
		return // the circuit allows no claim: its own timer wakes the coordinator
	}
	ctx, cancel := d.opContext()
	defer cancel()
	wait, ok, err := d.nextDue(ctx, types)
	if err != nil {
		d.report.Error("next due time", err)
		return
	}
	p.due.Stop()
	switch {
	case !ok:
	case wait <= 0:
		// Due already, yet the claim that just settled did not take it
		// (locked by another transaction, or became due since): claim
		// again after a cooldown, not at once, or this loop spins.
		p.due.Reset(max(d.cfg.WakeupCooldown, time.Millisecond))
	case wait < p.interval:
		p.due.Reset(wait)
	}
}

// nextDue is how long until the next event of types (nil: every type)
// that this dispatcher can claim is due (see lease.Store.NextDue). Under
// Ordering PerKey only the head of each key counts: the due events behind a blocked head are not
// work, and counting them woke a claim at every cooldown for as long as
// the key stayed blocked.
func (d *Dispatcher) nextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	if d.mode.Ordered() {
		return d.store.NextHeadDue(ctx, d.pool, types, d.cfg.HeadPolicy == BlockKey, d.cfg.OrderScope == ScopeKeyAndType)
	}
	return d.store.NextDue(ctx, d.pool, types)
}

// errWorkerLost is the error of the outcomes of events that recovery made
// FAILED.
var errWorkerLost = errors.New("lease expired: the worker holding the event stopped renewing it")

// maxRecoverTries bounds the statements in a row that one recovery pass
// lets run out of time, each with half the limit of the one before.
const maxRecoverTries = 4

// recoverBudget is how long one recovery pass may keep going while its
// statements come back full: half a poll interval, so that the
// coordinator claims between passes. Measured with the dispatcher's clock.
func (c Config) recoverBudget() time.Duration { return c.PollInterval / 2 }

// recoverGap is how soon the next poll comes after a recovery pass that
// left expired leases behind: a fifth of a pass's budget, so that a mass
// crash's leases come back in about recoverBudget/(recoverBudget+gap) of
// the time, while claims and wake-ups still run between passes.
func (c Config) recoverGap() time.Duration { return c.recoverBudget() / 5 }

// recoverLeases runs one recovery pass. It keeps recovering while
// statements come back full (a mass crash leaves many expired leases),
// until the pass has run recoverBudget, and tries again at once with half
// the limit when a statement runs out of time (a statement_timeout
// shorter than a recovery of limit rows takes). When the pass ends with a
// full statement, expired leases remain: p.recoverBacklog makes the next
// poll come after recoverGap, not a whole interval, and recover again.
func (d *Dispatcher) recoverLeases(ctx context.Context, p *poller, poll uint64) {
	start := d.cfg.now()
	statements, rows, timeouts := 0, 0, 0
	for {
		limit := p.recoverLimit
		got, next, timedOut := d.recoverExpired(ctx, limit)
		statements++
		rows += got
		p.recoverLimit = next
		p.recoverBacklog = got == limit
		if timedOut {
			timeouts++
		}
		more := p.recoverBacklog || timedOut && timeouts < maxRecoverTries && next < limit
		if !more || ctx.Err() != nil || d.life.stopRequested() || d.cfg.now().Sub(start) >= d.cfg.recoverBudget() {
			break
		}
	}
	if d.cfg.onRecoverPass != nil {
		d.cfg.onRecoverPass(poll, statements, rows)
	}
}

// recoverExpired returns up to limit expired leases to PENDING (or
// FAILED), in one statement, and returns how many it returned and the
// limit for the next recovery: halved when this one ran out of time,
// doubled back after a full one.
func (d *Dispatcher) recoverExpired(stop context.Context, limit int) (got, next int, timedOut bool) {
	ctx, cancel := d.opContextFrom(stop)
	defer cancel()
	res, err := d.store.Recover(ctx, d.pool, lease.RecoverParams{
		Limit: limit, MaxRecoveries: d.cfg.MaxRecoveries,
		AtMostOnce: d.cfg.Delivery == AtMostOnce,
	})
	if err != nil {
		if stop.Err() != nil {
			return 0, limit, false // cut short by the stop
		}
		d.report.Error("recovery failed", err)
		switch {
		case stmtsize.TimedOut(err): // the server ended it: a smaller batch fits
			return 0, max(1, limit/2), true
		case ranOutOfTime(err): // no answer in time: smaller next time, no retry now
			return 0, max(1, limit/2), false
		}
		return 0, limit, false
	}
	got = len(res.Pending) + len(res.Failed)
	next = limit
	if got == limit {
		next = min(2*limit, d.cfg.RecoverBatchSize)
	}
	d.held.Recovered(res.Pending...)
	for _, e := range res.Failed {
		d.held.Recovered(e.ID)
	}
	d.report.Counters.Recovered.Add(uint64(len(res.Pending)))
	d.report.Counters.RecoveredFailed.Add(uint64(len(res.Failed)))
	for _, e := range res.Failed {
		reportFailed(d.dbCtx, d.report, d.cfg.OnOutcome, Outcome{Event: e, Status: outbox.StatusFailed, Code: outbox.CodeWorkerLost, Err: errWorkerLost})
	}
	d.report.Recovered(res)
	return got, next, false
}
