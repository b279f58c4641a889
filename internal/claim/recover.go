package claim

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// ErrWorkerLost is the error of the outcomes of events that recovery made
// FAILED.
var ErrWorkerLost = errors.New("lease expired: the worker holding the event stopped renewing it")

// maxRecoverTries bounds the statements in a row that one recovery pass
// lets run out of time, each with half the limit of the one before.
const maxRecoverTries = 4

// recoverBudget is how long one recovery pass may keep going while its
// statements come back full: half a poll interval, so that the
// coordinator claims between passes. Measured with the dispatcher's clock.
func (c *Config) recoverBudget() time.Duration { return c.PollInterval / 2 }

// recoverGap is how soon the next poll comes after a recovery pass that
// left expired leases behind: a fifth of a pass's budget, so that a mass
// crash's leases come back in about recoverBudget/(recoverBudget+gap) of
// the time, while claims and wake-ups still run between passes.
func (c *Config) recoverGap() time.Duration { return c.recoverBudget() / 5 }

// recoverLeases runs one recovery pass. It keeps recovering while
// statements come back full (a mass crash leaves many expired leases),
// until the pass has run recoverBudget, and tries again at once with half
// the limit when a statement runs out of time (a statement_timeout
// shorter than a recovery of limit rows takes). When the pass ends with a
// full statement, expired leases remain: p.recoverBacklog makes the next
// poll come after recoverGap, not a whole interval, and recover again.
func (c *Claimer) recoverLeases(ctx context.Context, p *poller, poll uint64) {
	start := c.cfg.Clock.Now()
	statements, rows, timeouts := 0, 0, 0
	for {
		limit := p.recoverLimit
		got, next, timedOut := c.recoverExpired(ctx, limit)
		statements++
		rows += got
		p.recoverLimit = next
		p.recoverBacklog = got == limit
		if timedOut {
			timeouts++
		}
		more := p.recoverBacklog || timedOut && timeouts < maxRecoverTries && next < limit
		if !more || ctx.Err() != nil || c.stopRequested() || c.cfg.Clock.Since(start) >= c.cfg.recoverBudget() {
			break
		}
	}
	if c.cfg.RecoverPassHook != nil {
		c.cfg.RecoverPassHook(poll, statements, rows)
	}
}

// recoverExpired returns up to limit expired leases to PENDING (or
// FAILED), in one statement, and returns how many it returned and the
// limit for the next recovery: halved when this one ran out of time,
// doubled back after a full one.
func (c *Claimer) recoverExpired(stop context.Context, limit int) (got, next int, timedOut bool) {
	ctx, cancel := c.opContextFrom(stop)
	defer cancel()
	res, err := c.cfg.Store.Recover(ctx, c.cfg.Pool, lease.RecoverParams{
		Limit: limit, MaxRecoveries: c.cfg.MaxRecoveries,
		AtMostOnce: c.cfg.AtMostOnce,
	})
	if err != nil {
		if stop.Err() != nil {
			return 0, limit, false // cut short by the stop
		}
		c.cfg.Report.Error("recovery failed", err)
		switch {
		case stmtsize.TimedOut(err): // the server ended it: a smaller batch fits
			return 0, max(1, limit/2), true
		case pgerr.RanOutOfTime(err): // no answer in time: smaller next time, no retry now
			return 0, max(1, limit/2), false
		}
		return 0, limit, false
	}
	got = len(res.Pending) + len(res.Failed)
	next = limit
	if got == limit {
		next = min(2*limit, c.cfg.RecoverBatchSize)
	}
	c.cfg.Held.Recovered(res.Pending...)
	for _, e := range res.Failed {
		c.cfg.Held.Recovered(e.ID)
	}
	c.cfg.Report.Counters.Recovered.Add(uint64(len(res.Pending)))
	c.cfg.Report.Counters.RecoveredFailed.Add(uint64(len(res.Failed)))
	for _, e := range res.Failed {
		c.cfg.FailedFunc(e)
	}
	c.cfg.Report.Recovered(res)
	return got, next, false
}
