package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// claims runs the claims of one coordinator: up to Claimers at once, each
// in its own goroutine and on its own connection, so that PostgreSQL works
// on the next batches while this process dispatches the last ones. Only
// the coordinator goroutine calls its methods.
type claims struct {
	d        *Dispatcher
	results  chan claimResult
	inflight int
	reserved int  // room promised to claims in flight
	backlog  bool // the last claim came back full
	wanted   bool // a wake-up asked for a claim that has not started yet
	// suspectsLeft: a claim left suspects for later (see internal/run/suspect.go);
	// one is claimed again as soon as fewer wait for the suspect turn.
	suspectsLeft bool

	// After a failed claim no claim starts until retry fires: failures
	// back off exponentially, up to PollInterval.
	failures int
	retry    *time.Timer
	waiting  bool // retry is armed
	// size bounds the claims: halved by each claim that runs out of time
	// (a statement_timeout, or the operation timeout), grown back by full
	// ones (see stmtsize.Size), up to BatchSize.
	size stmtsize.Size
}

// firstClaimRetry is the wait after the first failed claim in a row.
const firstClaimRetry = 10 * time.Millisecond

// claimResult is what one claim reports back to the coordinator.
type claimResult struct {
	limit, got      int
	err             error
	skippedSuspects bool // the claim left suspects for later
}

func newClaims(d *Dispatcher) *claims {
	return &claims{
		d: d, results: make(chan claimResult, d.cfg.Claimers),
		retry: stoppedTimer(), size: stmtsize.New(d.cfg.BatchSize),
	}
}

// wake asks for a claim that starts after this call: now if room and a free
// claimer allow, else as soon as they do.
func (c *claims) wake() {
	c.wanted = true
	c.fill()
}

// roomFreed starts claims after events were let go, when a backlog or a
// wake-up is waiting for room, or when suspects were left for later and
// fewer wait for the suspect turn now.
func (c *claims) roomFreed() {
	if c.suspectsLeft && !c.d.skipSuspects() {
		c.suspectsLeft, c.wanted = false, true
	}
	if c.backlog || c.wanted {
		c.fill()
	}
}

// fill starts claims while a claimer is free and there is room: one for a
// wake-up, and while a backlog remains as many as Claimers allows.
func (c *claims) fill() {
	for !c.waiting && c.inflight < c.d.mode.Claimers() && (c.wanted || c.backlog) {
		limit := min(c.d.claimLimit(c.reserved), c.size.Limit())
		if limit == 0 {
			return
		}
		plan, ok := c.d.circuit.Plan(c.d.kinds.circuitTypes(), limit)
		if !ok {
			return // the circuit is open: its timer wakes the coordinator
		}
		c.inflight++
		c.reserved += plan.Limit
		c.wanted = false
		go func() { c.results <- c.d.claim(plan) }()
	}
}

// finished takes one claim's result and starts the next claims. It reports
// whether claiming has settled: nothing in flight, no backlog and no
// wake-up waiting.
func (c *claims) finished(r claimResult) bool {
	c.inflight--
	c.reserved -= r.limit
	c.backlog = r.err == nil && r.got == r.limit
	c.suspectsLeft = c.suspectsLeft || r.skippedSuspects
	if r.err != nil {
		c.failed(r)
	} else {
		c.failures = 0
		if c.backlog {
			c.size.Full(r.limit)
		}
	}
	if c.backlog || c.wanted {
		c.fill()
	}
	return c.settled()
}

// failed backs claiming off after a failed claim, and shrinks the claims
// below the one that ran out of time.
func (c *claims) failed(r claimResult) {
	if ranOutOfTime(r.err) {
		c.size.RanOutOfTime(r.limit)
	}
	c.failures++
	wait := min(firstClaimRetry<<min(c.failures-1, 20), c.d.cfg.PollInterval)
	c.waiting = true
	c.retry.Reset(wait)
}

// retryNow ends a backoff: a claim starts as soon as room allows.
func (c *claims) retryNow() {
	c.waiting = false
	c.wake()
}

// ranOutOfTime reports whether a statement failed for lack of time: a
// statement_timeout (or any cancellation by the server) or the
// operation's own timeout.
func ranOutOfTime(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || stmtsize.TimedOut(err)
}

// settled reports whether no claim is in flight, wanted or backing off and
// the last one found the table drained.
func (c *claims) settled() bool {
	return c.inflight == 0 && !c.backlog && !c.wanted && !c.waiting
}

// wait lets every claim in flight end, so that their events are held (and
// released by the drain) before the coordinator returns.
func (c *claims) wait() {
	c.retry.Stop()
	for ; c.inflight > 0; c.inflight-- {
		<-c.results
	}
}

// claimLimit is how many events the next claim may take, with reserved
// events already promised to claims in flight: up to BatchSize, within the
// room left, and 0 when less than half a batch of room is left (so a busy
// dispatcher claims in batches rather than one row at a time). The
// dispatcher holds at most Concurrency + Claimers × BatchSize events:
// batches are claimed ahead while Concurrency handlers run, so that
// claiming and dispatching overlap. Suspects waiting for their turn, up to
// a batch of them, take no room (the mode's Room; see internal/run/suspect.go).
func (d *Dispatcher) claimLimit(reserved int) int {
	held, suspects, stopping := d.held.Room()
	if stopping {
		return 0
	}
	used := d.mode.Room(held, suspects) + reserved
	free := d.cfg.Concurrency + d.cfg.Claimers*d.cfg.BatchSize - used
	if free < max(1, d.cfg.BatchSize/2) && used > 0 {
		return 0
	}
	return min(d.cfg.BatchSize, free)
}

// claim takes up to p.Limit events of p's types (see types.go and
// circuit.go) and has the mode run them.
func (d *Dispatcher) claim(p circuit.Plan) claimResult {
	limit := p.Limit
	ctx, cancel := d.opContext()
	defer cancel()
	sentAt := d.cfg.now()
	d.report.Counters.ClaimCycles.Add(1)
	starts, slots := d.mode.StartsFor(limit)
	skipSuspects := d.skipSuspects()
	b, err := d.store.Claim(ctx, d.pool, lease.ClaimParams{
		Owner: d.cfg.Owner, Limit: limit, Lease: d.cfg.LeaseDuration, Start: starts, Types: p.Types,
		Ordered: d.mode.Ordered(), BlockFailed: d.cfg.HeadPolicy == BlockKey, Skip: d.held.Stuck(),
		SkipSuspects: skipSuspects,
		ByType:       d.cfg.OrderScope == ScopeKeyAndType,
	})
	d.health.claimed(err)
	if err != nil {
		d.mode.ReleaseSlots(slots)
		d.report.Error("claim failed", err)
		return claimResult{limit: limit, err: err}
	}
	var batch context.Context
	if len(b.Events) > 0 {
		if d.cfg.onClaimed != nil {
			d.cfg.onClaimed(b.Events)
		}
		d.report.Counters.Claimed.Add(uint64(len(b.Events)))
		batch = d.dispatch(b, sentAt, slots)
	} else {
		d.mode.ReleaseSlots(slots)
	}
	d.probeClaimed(p, batch)
	return claimResult{limit: limit, got: len(b.Events), skippedSuspects: skipSuspects}
}

// dispatch holds a claimed batch sent at sentAt and runs it. slots is
// the number of handler slots the mode's StartsFor took for the claim: the marked
// events among the first slots start in them, and the rest are given back.
// It returns the batch's context, which ends when every event of the batch
// has been let go.
func (d *Dispatcher) dispatch(b lease.Batch, sentAt time.Time, slots int) context.Context {
	items, given := d.held.Add(d.workCtx, b, sentAt, slots)
	d.mode.ReleaseSlots(slots - given)
	return d.mode.Dispatch(items)
}

// skipSuspects reports whether the next claim leaves suspects out (see
// internal/run/suspect.go).
func (d *Dispatcher) skipSuspects() bool {
	_, suspects, _ := d.held.Room()
	return d.mode.SkipSuspects(suspects)
}
