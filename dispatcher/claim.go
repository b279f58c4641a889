package dispatcher

import "github.com/pgoutbox/pgoutbox/lease"

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
}

// claimResult is what one claim reports back to the coordinator.
type claimResult struct {
	limit, got int
	err        error
}

func newClaims(d *Dispatcher) *claims {
	return &claims{d: d, results: make(chan claimResult, d.cfg.Claimers)}
}

// wake asks for a claim that starts after this call: now if room and a free
// claimer allow, else as soon as they do.
func (c *claims) wake() {
	c.wanted = true
	c.fill()
}

// roomFreed starts claims after events were let go, when a backlog or a
// wake-up is waiting for room.
func (c *claims) roomFreed() {
	if c.backlog || c.wanted {
		c.fill()
	}
}

// fill starts claims while a claimer is free and there is room: one for a
// wake-up, and while a backlog remains as many as Claimers allows.
func (c *claims) fill() {
	for c.inflight < c.d.cfg.Claimers && (c.wanted || c.backlog) {
		limit := c.d.claimLimit(c.reserved)
		if limit == 0 {
			return
		}
		c.inflight++
		c.reserved += limit
		c.wanted = false
		go func() { c.results <- c.d.claim(limit) }()
	}
}

// finished takes one claim's result and starts the next claims. It reports
// whether claiming has settled: nothing in flight, no backlog and no
// wake-up waiting.
func (c *claims) finished(r claimResult) bool {
	c.inflight--
	c.reserved -= r.limit
	c.backlog = r.err == nil && r.got == r.limit
	if c.backlog || c.wanted {
		c.fill()
	}
	return c.settled()
}

// settled reports whether no claim is in flight or wanted and the last one
// found the table drained.
func (c *claims) settled() bool {
	return c.inflight == 0 && !c.backlog && !c.wanted
}

// wait lets every claim in flight end, so that their events are held (and
// released by the drain) before the coordinator returns.
func (c *claims) wait() {
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
// claiming and dispatching overlap.
func (d *Dispatcher) claimLimit(reserved int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return 0
	}
	used := len(d.held) + reserved
	free := d.cfg.Concurrency + d.cfg.Claimers*d.cfg.BatchSize - used
	if free < max(1, d.cfg.BatchSize/2) && used > 0 {
		return 0
	}
	return min(d.cfg.BatchSize, free)
}

// claim takes up to limit events and starts them.
func (d *Dispatcher) claim(limit int) claimResult {
	ctx, cancel := d.opContext()
	defer cancel()
	sentAt := d.cfg.Test.Now()
	d.stats.claimCycles.Add(1)
	starts, slots := d.startsFor(limit)
	b, err := d.store.Claim(ctx, d.pool, lease.ClaimParams{
		Owner: d.cfg.Owner, Limit: limit, Lease: d.cfg.LeaseDuration, Start: starts,
	})
	if err != nil {
		d.releaseSlots(slots)
		d.reportError("claim failed", err)
		return claimResult{limit: limit, err: err}
	}
	if len(b.Events) > 0 {
		d.stats.claimed.Add(uint64(len(b.Events)))
		d.start(b, sentAt, slots)
	} else {
		d.releaseSlots(slots)
	}
	return claimResult{limit: limit, got: len(b.Events)}
}
