package claim

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// claims runs the claims of one coordinator: up to Claimers at once, each
// in its own goroutine and on its own connection, so that PostgreSQL works
// on the next batches while this process dispatches the last ones. Only
// the coordinator goroutine calls its methods.
type claims struct {
	c        *Claimer
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

func (c *Claimer) newClaims() *claims {
	return &claims{
		c: c, results: make(chan claimResult, c.cfg.Claimers),
		retry: c.stoppedTimer(), size: stmtsize.New(c.cfg.BatchSize),
	}
}

// wake asks for a claim that starts after this call: now if room and a free
// claimer allow, else as soon as they do.
func (cl *claims) wake() {
	cl.wanted = true
	cl.fill()
}

// roomFreed starts claims after events were let go, when a backlog or a
// wake-up is waiting for room, or when suspects were left for later and
// fewer wait for the suspect turn now.
func (cl *claims) roomFreed() {
	if cl.suspectsLeft && !cl.c.skipSuspects() {
		cl.suspectsLeft, cl.wanted = false, true
	}
	if cl.backlog || cl.wanted {
		cl.fill()
	}
}

// fill starts claims while a claimer is free and there is room: one for a
// wake-up, and while a backlog remains as many as Claimers allows.
func (cl *claims) fill() {
	for !cl.waiting && cl.inflight < cl.c.cfg.Scheduler.Claimers() && (cl.wanted || cl.backlog) {
		limit := min(cl.c.claimLimit(cl.reserved), cl.size.Limit())
		if limit == 0 {
			return
		}
		plan, ok := cl.c.cfg.Circuit.Plan(cl.c.kinds.circuit, limit)
		if !ok {
			return // the circuit is open: its timer wakes the coordinator
		}
		cl.inflight++
		cl.reserved += plan.Limit
		cl.wanted = false
		go func() { cl.results <- cl.c.claim(plan) }()
	}
}

// finished takes one claim's result and starts the next claims. It reports
// whether claiming has settled: nothing in flight, no backlog and no
// wake-up waiting.
func (cl *claims) finished(r claimResult) bool {
	cl.inflight--
	cl.reserved -= r.limit
	cl.backlog = r.err == nil && r.got == r.limit
	cl.suspectsLeft = cl.suspectsLeft || r.skippedSuspects
	if r.err != nil {
		cl.failed(r)
	} else {
		cl.failures = 0
		if cl.backlog {
			cl.size.Full(r.limit)
		}
	}
	if cl.backlog || cl.wanted {
		cl.fill()
	}
	return cl.settled()
}

// failed backs claiming off after a failed claim, and shrinks the claims
// below the one that ran out of time.
func (cl *claims) failed(r claimResult) {
	if pgerr.RanOutOfTime(r.err) {
		cl.size.RanOutOfTime(r.limit)
	}
	cl.failures++
	wait := min(firstClaimRetry<<min(cl.failures-1, 20), cl.c.cfg.PollInterval)
	cl.waiting = true
	cl.retry.Reset(wait)
}

// retryNow ends a backoff: a claim starts as soon as room allows.
func (cl *claims) retryNow() {
	cl.waiting = false
	cl.wake()
}

// settled reports whether no claim is in flight, wanted or backing off and
// the last one found the table drained.
func (cl *claims) settled() bool {
	return cl.inflight == 0 && !cl.backlog && !cl.wanted && !cl.waiting
}

// wait lets every claim in flight end, so that their events are held (and
// released by the drain) before the coordinator returns.
func (cl *claims) wait() {
	cl.retry.Stop()
	for ; cl.inflight > 0; cl.inflight-- {
		<-cl.results
	}
}

// claimLimit is how many events the next claim may take, with reserved
// events already promised to claims in flight: up to BatchSize, within the
// room left, and 0 when less than half a batch of room is left (so a busy
// dispatcher claims in batches rather than one row at a time). The
// dispatcher holds at most Concurrency + Claimers × BatchSize events:
// batches are claimed ahead while Concurrency handlers run, so that
// claiming and dispatching overlap. Suspects waiting for their turn, up to
// a batch of them, take no room (the Scheduler's Room; see internal/run/suspect.go).
func (c *Claimer) claimLimit(reserved int) int {
	held, suspects, stopping := c.cfg.Held.Room()
	if stopping {
		return 0
	}
	used := c.cfg.Scheduler.Room(held, suspects) + reserved
	free := c.cfg.Concurrency + c.cfg.Claimers*c.cfg.BatchSize - used
	if free < max(1, c.cfg.BatchSize/2) && used > 0 {
		return 0
	}
	return min(c.cfg.BatchSize, free)
}

// claim takes up to p.Limit events of p's types (see types.go and
// internal/run/circuit.go) and has the Scheduler run them.
func (c *Claimer) claim(p circuit.Plan) claimResult {
	limit := p.Limit
	ctx, cancel := c.opContext()
	defer cancel()
	sentAt := c.cfg.Clock.Now()
	c.cfg.Report.Counters.ClaimCycles.Add(1)
	starts, slots := c.cfg.Scheduler.StartsFor(limit)
	skipSuspects := c.skipSuspects()
	b, err := c.cfg.Store.Claim(ctx, c.cfg.Pool, lease.ClaimParams{
		Owner: c.cfg.Owner, Limit: limit, Lease: c.cfg.LeaseDuration, Start: starts, Types: p.Types,
		Ordered: c.cfg.Scheduler.Ordered(), BlockFailed: c.cfg.BlockFailed, Skip: c.cfg.Held.Stuck(),
		SkipSuspects: skipSuspects,
		ByType:       c.cfg.ByType,
	})
	c.cfg.ClaimedFunc(err)
	if err != nil {
		c.cfg.Scheduler.ReleaseSlots(slots)
		c.cfg.Report.Error("claim failed", err)
		return claimResult{limit: limit, err: err}
	}
	var batch context.Context
	if len(b.Events) > 0 {
		if c.cfg.ClaimHook != nil {
			c.cfg.ClaimHook(b.Events)
		}
		c.cfg.Report.Counters.Claimed.Add(uint64(len(b.Events)))
		batch = c.dispatch(b, sentAt, slots)
	} else {
		c.cfg.Scheduler.ReleaseSlots(slots)
	}
	c.probeClaimed(p, batch)
	return claimResult{limit: limit, got: len(b.Events), skippedSuspects: skipSuspects}
}

// dispatch holds a claimed batch sent at sentAt and runs it. slots is
// the number of handler slots the Scheduler's StartsFor took for the claim: the marked
// events among the first slots start in them, and the rest are given back.
// It returns the batch's context, which ends when every event of the batch
// has been let go.
func (c *Claimer) dispatch(b lease.Batch, sentAt time.Time, slots int) context.Context {
	items, given := c.cfg.Held.Add(c.workCtx, b, sentAt, slots)
	c.cfg.Scheduler.ReleaseSlots(slots - given)
	return c.cfg.Scheduler.Dispatch(items)
}

// skipSuspects reports whether the next claim leaves suspects out (see
// internal/run/suspect.go).
func (c *Claimer) skipSuspects() bool {
	_, suspects, _ := c.cfg.Held.Room()
	return c.cfg.Scheduler.SkipSuspects(suspects)
}

// probeClaimed follows a probe claim: one that claimed nothing ends at
// once; otherwise the probe ends when its batch does (every event let
// go), unless a publish decided first.
func (c *Claimer) probeClaimed(p circuit.Plan, batch context.Context) {
	if p.Probe == 0 {
		return
	}
	if batch == nil {
		c.cfg.Circuit.ProbeEnded(p.Probe, false)
		return
	}
	context.AfterFunc(batch, func() { c.cfg.Circuit.ProbeEnded(p.Probe, true) })
}
