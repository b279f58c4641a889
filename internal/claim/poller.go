package claim

import (
	"context"
	"time"
)

// poller holds the poll timer, whose interval stretches (up to
// IdlePollInterval, by default not at all) while the table is idle and
// wake-ups work, and the timer that fires when the next retry is due.
type poller struct {
	cfg           *Config
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

func (c *Claimer) newPoller() *poller {
	return &poller{
		cfg: &c.cfg, interval: c.cfg.PollInterval, poll: c.cfg.Clock.NewTimer(c.cfg.PollInterval),
		due: c.stoppedTimer(), lastRecovered: c.cfg.Clock.Mono(),
		recoverLimit: c.cfg.RecoverBatchSize,
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
	now := p.cfg.Clock.Mono()
	if p.recoverBacklog || n%uint64(p.cfg.RecoverEvery) == 0 || now.Sub(p.lastRecovered) >= time.Duration(p.cfg.RecoverEvery)*p.cfg.PollInterval {
		p.lastRecovered = now
		return true
	}
	return false
}

// pollCycle counts a poll; when it is time it recovers expired leases
// (of every type: a crashed replica's leases are taken back by whichever
// replica recovers first, and then claimed by one that claims their type)
// and counts the events of types this dispatcher does not claim; and it
// logs the counts of repeated log lines held back.
func (c *Claimer) pollCycle(ctx context.Context, p *poller) {
	n := c.cfg.Report.Counters.PollCycles.Add(1)
	c.cfg.Report.Counters.LastPoll.Store(c.cfg.Clock.Mono().UnixNano())
	if p.recoverDue(n) {
		c.recoverLeases(ctx, p, n)
		c.checkWaiting(ctx)
	}
	c.cfg.Report.FlushRepeats()
}

// armDue sets the due timer to the next PENDING event's next_attempt_at
// (of a type it claims)
// (database clock), when that comes before the next poll; when an event is
// due already (a short backoff, or one that became due while the
// coordinator was busy) it triggers a claim instead. It runs once claims
// have settled with no backlog, only while wake-ups work: then polls may be
// far apart (stretched), and retries and delayed events must still run on
// time.
func (c *Claimer) armDue(p *poller) {
	if !c.cfg.WakeupsActiveFunc() {
		return
	}
	types, ok := c.cfg.Circuit.DueTypes(c.kinds.circuit)
	if !ok {
		return // the circuit allows no claim: its own timer wakes the coordinator
	}
	ctx, cancel := c.opContext()
	defer cancel()
	wait, ok, err := c.nextDue(ctx, types)
	if err != nil {
		c.cfg.Report.Error("next due time", err)
		return
	}
	if c.cfg.DueProbeHook != nil {
		c.cfg.DueProbeHook(wait, ok)
	}
	p.due.Stop()
	switch {
	case !ok:
	case wait <= 0:
		// Due already, yet the claim that just settled did not take it
		// (locked by another transaction, or became due since): claim
		// again after a cooldown, not at once, or this loop spins.
		p.due.Reset(max(c.cfg.WakeupCooldown, time.Millisecond))
	case wait < p.interval:
		p.due.Reset(wait)
	}
}

// nextDue is how long until the next event of types (nil: every type)
// that this dispatcher can claim is due (see lease.Store.NextDue). When
// the Scheduler's claims are Ordered (per key) only the head of each key
// counts: the due events behind a blocked head are not work, and counting
// them woke a claim at every cooldown for as long as the key stayed
// blocked.
func (c *Claimer) nextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	if c.cfg.Scheduler.Ordered() {
		return c.cfg.Store.NextHeadDue(ctx, c.cfg.Pool, types, c.cfg.BlockFailed, c.cfg.ByType)
	}
	return c.cfg.Store.NextDue(ctx, c.cfg.Pool, types)
}
