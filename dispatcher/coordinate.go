package dispatcher

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/lease"
)

// coordinate is the one loop that decides when to claim: at start, on every
// poll tick, on a trigger, and when slots free up while a backlog remains.
// Every RecoverEvery-th poll tick it first recovers expired leases. It
// returns when ctx ends or Stop is called.
func (d *Dispatcher) coordinate(ctx context.Context) {
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	backlog := d.claimUntilFull()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopCh:
			return
		case <-ticker.C:
			d.pollCycle()
			backlog = d.claimUntilFull()
		case <-d.trigger:
			backlog = d.claimUntilFull()
		case <-d.capacity:
			if backlog {
				backlog = d.claimUntilFull()
			}
		}
	}
}

// pollCycle counts a poll tick and runs recovery on every RecoverEvery-th.
func (d *Dispatcher) pollCycle() {
	n := d.stats.pollCycles.Add(1)
	d.stats.lastPoll.Store(time.Now().UnixNano())
	if n%uint64(d.cfg.RecoverEvery) == 0 {
		d.recoverExpired()
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
// within the free slots, and 0 when fewer than half a batch are free (so a
// busy dispatcher claims in batches rather than one row at a time).
func (d *Dispatcher) claimLimit() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return 0
	}
	free := d.cfg.Concurrency - len(d.held)
	batch := min(d.cfg.BatchSize, d.cfg.Concurrency)
	if free < max(1, batch/2) && len(d.held) > 0 {
		return 0
	}
	return min(batch, free)
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
	if n := len(res.Pending) + len(res.Failed); n > 0 {
		d.cfg.Logger.Info("pgoutbox: recovered expired leases", "table", d.cfg.Table.String(),
			"pending", len(res.Pending), "failed", len(res.Failed))
	}
}
