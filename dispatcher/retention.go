package dispatcher

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// retention is the state of the retention job, which deletes SENT rows
// older than RetainSent and FAILED rows older than RetainFailed. It runs
// on a goroutine of its own, on one pool connection at a time, never in a
// claim or completion statement and never holding a handler slot. Each
// batch is one statement under a transaction-level advisory lock (see
// internal/purge), so one replica at a time deletes, also through a
// transaction-mode pooler.
type retention struct {
	d     *Dispatcher
	store *purge.Store
	// limit is the batch size: halved by a batch that ran out of time (a
	// statement_timeout shorter than a batch takes), doubled back by each
	// full one, up to RetentionBatchSize.
	limit int
}

// retain runs a retention pass every RetentionInterval, the first at a
// random point of the first interval, until quit ends or Stop is called;
// a pass cut short rolls back its current batch only. It returns at once
// when there is nothing to delete (KeepSent, and FAILED rows kept).
func (d *Dispatcher) retain(quit context.Context) {
	if d.cfg.KeepSent && d.cfg.RetainFailed == 0 {
		return
	}
	names, err := sqlname.For(d.cfg.Table) // validated by New
	if err != nil {
		d.reportError("retention", err)
		return
	}
	ctx, cancel := d.untilStop(quit)
	defer cancel()
	r := &retention{d: d, store: purge.New(names), limit: d.cfg.RetentionBatchSize}
	timer := time.NewTimer(rand.N(d.cfg.RetentionInterval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		r.pass(ctx)
		timer.Reset(d.cfg.RetentionInterval)
	}
}

// pass deletes the due SENT rows, then the due FAILED rows, and logs what
// it deleted: INFO when it deleted rows, DEBUG otherwise (one line per
// pass, so at most one per RetentionInterval).
func (r *retention) pass(ctx context.Context) {
	d := r.d
	d.stats.retentionPasses.Add(1)
	var sent, failed int64
	skipped := false
	if !d.cfg.KeepSent {
		sent, skipped = r.purge(ctx, outbox.StatusSent, d.cfg.RetainSent)
	}
	if !skipped && d.cfg.RetainFailed > 0 {
		failed, skipped = r.purge(ctx, outbox.StatusFailed, d.cfg.RetainFailed)
	}
	if skipped {
		d.stats.retentionSkipped.Add(1)
	}
	level := slog.LevelDebug
	if sent+failed > 0 {
		level = slog.LevelInfo
	}
	d.cfg.Logger.Log(d.dbCtx, level, "pgoutbox: retention pass", "table", d.cfg.Table.String(),
		"deleted_sent", sent, "deleted_failed", failed, "other_replica_deleting", skipped)
}

// purge deletes the rows of status older than age in batches until a
// batch comes back short, the stop, an error, or another replica's batch
// holding the lock (skipped). It returns how many rows it deleted.
func (r *retention) purge(ctx context.Context, status outbox.Status, age time.Duration) (deleted int64, skipped bool) {
	for ctx.Err() == nil {
		res, err := r.batch(ctx, purge.Params{Status: status, OlderThan: age, Limit: r.limit, Exclusive: true})
		switch {
		case err != nil && ctx.Err() != nil: // cut short by the stop: the batch rolled back
			return deleted, false
		case err != nil:
			r.d.reportError(retentionFailed(status, err), err)
			if !ranOutOfTime(err) || r.limit == 1 {
				return deleted, false
			}
			r.limit = max(1, r.limit/2) // a smaller batch may fit
			continue
		case res.Skipped:
			return deleted, true
		}
		deleted += res.Deleted
		r.counter(status).Add(uint64(res.Deleted))
		if res.Deleted < int64(r.limit) {
			return deleted, false
		}
		r.limit = min(2*r.limit, r.d.cfg.RetentionBatchSize)
	}
	return deleted, false
}

// counter is the Stats counter of the rows of status deleted.
func (r *retention) counter(status outbox.Status) *atomic.Uint64 {
	if status == outbox.StatusFailed {
		return &r.d.stats.retentionFailed
	}
	return &r.d.stats.retentionSent
}

// batch runs one bounded DELETE.
func (r *retention) batch(ctx context.Context, p purge.Params) (purge.Result, error) {
	d := r.d
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	res, err := r.store.Delete(ctx, d.pool, p)
	if err == nil && d.cfg.onRetentionBatch != nil {
		d.cfg.onRetentionBatch(p.Status, p.Limit, res)
	}
	return res, err
}

// retentionFailed is the log message of a failed retention batch, with
// what to do when the dispatcher's role may not delete.
func retentionFailed(status outbox.Status, err error) string {
	msg := "retention of " + string(status) + " rows failed"
	if pgerr.Code(err) == pgerr.InsufficientPrivilege {
		msg += ": the dispatcher's role needs DELETE on the outbox table, or set KeepSent (and no RetainFailed) to keep rows"
	}
	return msg
}
