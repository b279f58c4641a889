package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// coordinate is the one loop that decides when to claim: at start, on every
// poll, on a trigger (manual or a notification), when slots free up while a
// backlog remains, and (while wake-ups work) when the next retry becomes
// due.
// Polls recover expired leases every RecoverEvery-th time. It returns when
// ctx ends or Stop is called.
func (d *Dispatcher) coordinate(ctx context.Context) {
	p := newPoller(d.cfg)
	defer p.stop()
	if ctx.Err() != nil || d.stopRequested() {
		return
	}
	backlog := d.claimUntilFull()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopCh:
			return
		case <-p.poll.C:
			d.pollCycle(p)
			backlog = d.claimUntilFull()
			p.next(d.wakeupsActive.Load(), d.stats.claimed.Load())
			d.armDue(p, backlog)
		case <-d.trigger:
			if !p.coolDown() {
				continue
			}
			backlog = d.claimUntilFull()
			d.armDue(p, backlog)
		case <-p.cooled.C:
			p.cooling, p.lastWake = false, time.Now()
			backlog = d.claimUntilFull()
			d.armDue(p, backlog)
		case <-d.capacity:
			if !backlog {
				continue
			}
			backlog = d.claimUntilFull()
		case <-d.retried:
			d.armDue(p, backlog)
		case <-p.due.C:
			d.stats.dueWakeups.Add(1)
			backlog = d.claimUntilFull()
			d.armDue(p, backlog)
		}
		d.stats.pollInterval.Store(int64(p.interval))
	}
}

// poller holds the poll timer, whose interval stretches while the table is
// idle and wake-ups work, and the timer that fires when the next retry is
// due.
type poller struct {
	cfg           Config
	interval      time.Duration
	poll, due     *time.Timer
	cooled        *time.Timer // the wake-up cooldown ended with a trigger pending
	cooling       bool        // cooled is armed
	lastClaimed   uint64
	lastRecovered time.Time
	lastWake      time.Time
}

func newPoller(cfg Config) *poller {
	return &poller{
		cfg: cfg, interval: cfg.PollInterval, poll: time.NewTimer(cfg.PollInterval),
		due: stoppedTimer(), cooled: stoppedTimer(), lastRecovered: time.Now(),
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (p *poller) stop() {
	p.poll.Stop()
	p.due.Stop()
	p.cooled.Stop()
}

// coolDown decides what a trigger does: claim now (true) when the last
// wake-up claim was at least WakeupCooldown ago, else arm the cooldown
// timer (once) so that every trigger until then coalesces into one claim
// at its end.
func (p *poller) coolDown() bool {
	wait := p.cfg.WakeupCooldown - time.Since(p.lastWake)
	if wait <= 0 && !p.cooling {
		p.lastWake = time.Now()
		return true
	}
	if !p.cooling {
		p.cooling = true
		p.cooled.Reset(max(wait, 0))
	}
	return false
}

// next sets the interval of the next poll: doubled (up to IdlePollInterval)
// when wake-ups work and nothing was claimed since the last poll, else
// PollInterval.
func (p *poller) next(wakeups bool, claimed uint64) {
	if wakeups && claimed == p.lastClaimed {
		p.interval = min(2*p.interval, p.cfg.IdlePollInterval)
	} else {
		p.interval = p.cfg.PollInterval
	}
	p.lastClaimed = claimed
	p.poll.Reset(p.interval)
}

// recoverDue reports whether this poll should recover expired leases: every
// RecoverEvery-th poll, or when RecoverEvery plain poll intervals have
// passed (so that stretched polls do not delay recovery).
func (p *poller) recoverDue(n uint64) bool {
	if n%uint64(p.cfg.RecoverEvery) == 0 || time.Since(p.lastRecovered) >= time.Duration(p.cfg.RecoverEvery)*p.cfg.PollInterval {
		p.lastRecovered = time.Now()
		return true
	}
	return false
}

// pollCycle counts a poll and recovers expired leases when it is time.
func (d *Dispatcher) pollCycle(p *poller) {
	n := d.stats.pollCycles.Add(1)
	d.stats.lastPoll.Store(time.Now().UnixNano())
	if p.recoverDue(n) {
		d.recoverExpired()
	}
}

// armDue sets the due timer to the next PENDING event's next_attempt_at
// (database clock), when that comes before the next poll; when an event is
// due already (a short backoff, or one that became due while the
// coordinator was busy) it triggers a claim instead. It runs after claims
// that left no backlog, only while wake-ups work: then polls may be far
// apart (stretched), and retries and delayed events must still run on time.
func (d *Dispatcher) armDue(p *poller, backlog bool) {
	if backlog || !d.wakeupsActive.Load() {
		return
	}
	ctx, cancel := d.opContext()
	defer cancel()
	wait, ok, err := d.store.NextDue(ctx, d.pool)
	if err != nil {
		d.reportError("next due time", err)
		return
	}
	p.due.Stop()
	switch {
	case !ok:
	case wait <= 0:
		d.Trigger()
	case wait < p.interval:
		p.due.Reset(wait)
	}
}

// claimUntilFull claims batches while slots are free and the last claim came
// back full. It reports whether a backlog probably remains (the last claim
// was full, or slots ran out before the table was drained).
func (d *Dispatcher) claimUntilFull() (backlog bool) {
	for {
		limit := d.claimLimit()
		if limit == 0 {
			return true
		}
		n, err := d.claim(limit)
		if err != nil || n < limit {
			return false
		}
	}
}

// claimLimit is how many events the next claim may take: up to BatchSize,
// within the room left, and 0 when less than half a batch of room is left
// (so a busy dispatcher claims in batches rather than one row at a time).
// The dispatcher holds at most Concurrency + BatchSize events: one batch
// is claimed ahead while Concurrency handlers run, so that claiming and
// dispatching overlap.
func (d *Dispatcher) claimLimit() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return 0
	}
	free := d.cfg.Concurrency + d.cfg.BatchSize - len(d.held)
	if free < max(1, d.cfg.BatchSize/2) && len(d.held) > 0 {
		return 0
	}
	return min(d.cfg.BatchSize, free)
}

// claim takes up to limit events and starts them. It returns how many it
// claimed.
func (d *Dispatcher) claim(limit int) (int, error) {
	ctx, cancel := d.opContext()
	defer cancel()
	sentAt := d.cfg.Test.Now()
	d.stats.claimCycles.Add(1)
	b, err := d.store.Claim(ctx, d.pool, lease.ClaimParams{Owner: d.cfg.Owner, Limit: limit, Lease: d.cfg.LeaseDuration})
	if err != nil {
		d.reportError("claim failed", err)
		return 0, err
	}
	if len(b.Events) == 0 {
		return 0, nil
	}
	d.stats.claimed.Add(uint64(len(b.Events)))
	d.start(b, sentAt)
	return len(b.Events), nil
}

// errWorkerLost is the error OnFailed receives for events that recovery
// made FAILED.
var errWorkerLost = errors.New("lease expired: the worker holding the event stopped renewing it")

// recoverExpired returns expired leases to PENDING (or FAILED), in one
// bounded statement.
func (d *Dispatcher) recoverExpired() {
	ctx, cancel := d.opContext()
	defer cancel()
	res, err := d.store.Recover(ctx, d.pool, lease.RecoverParams{
		Limit: d.cfg.RecoverBatchSize, MaxRecoveries: d.cfg.MaxRecoveries,
		AtMostOnce: d.cfg.Delivery == AtMostOnce,
	})
	if err != nil {
		d.reportError("recovery failed", err)
		return
	}
	d.stats.recovered.Add(uint64(len(res.Pending)))
	d.stats.recoveredFailed.Add(uint64(len(res.Failed)))
	if d.cfg.OnFailed != nil {
		for _, e := range res.Failed {
			d.cfg.OnFailed(e, outbox.CodeWorkerLost, errWorkerLost)
		}
	}
	if n := len(res.Pending) + len(res.Failed); n > 0 {
		d.cfg.Logger.Info("pgoutbox: recovered expired leases", "table", d.cfg.Table.String(),
			"pending", len(res.Pending), "failed", len(res.Failed))
	}
}
