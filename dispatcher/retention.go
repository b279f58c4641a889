package dispatcher

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
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
	names sqlname.Names
	store *purge.Store
	// drains holds, by status, the drain a pass left unfinished when its
	// time ran out: the next pass goes on with it.
	drains map[outbox.Status]*drain
	// warned is set once the missing finished index has been logged.
	warned bool
}

// drain is where the deletion of one status's due rows stands: from the
// first batch of a pass (or of a pass that went on with an unfinished
// drain) to the first short batch, an error, or another replica's turn.
type drain struct {
	// limit is the batch size: RetentionBatchSize at the start, halved by
	// each batch that runs out of time (a statement_timeout shorter than a
	// batch takes), and never raised again during the drain.
	limit int
	// after is when the last row deleted finished: the next batch starts
	// there in the finished index (purge.Params.After).
	after time.Time
}

// retain runs a retention pass every RetentionInterval, the first at a
// random point of the first interval, until runCtx or quit ends or Stop
// is called; a pass cut short ends with its current batch cancelled. It
// returns at once when there is nothing to delete (KeepSent, and FAILED
// rows kept).
func (d *Dispatcher) retain(runCtx, quit context.Context) {
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
	defer context.AfterFunc(runCtx, cancel)()
	r := &retention{d: d, names: names, store: purge.New(names), drains: map[outbox.Status]*drain{}}
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

// indexReady reports whether the table's finished index (migration 004)
// exists and is valid. Without it each batch would scan and sort the whole
// table, so the pass is skipped, with one WARN the first time.
func (r *retention) indexReady(ctx context.Context) bool {
	d := r.d
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	index := pgx.Identifier{d.cfg.Table.Schema, r.names.Object(sqlname.SuffixFinishedIndex)}.Sanitize()
	var valid bool
	err := d.pool.QueryRow(ctx, `SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)`,
		index).Scan(&valid)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		d.reportError("retention: check the finished index", errtext.Wrap(err, "dispatcher: retention: check index %s", index))
		return false
	case !valid && !r.warned:
		r.warned = true
		d.cfg.Logger.Warn("pgoutbox: retention skipped: the finished index is missing or invalid; run migrations.Migrate",
			"table", d.cfg.Table.String(), "index", index)
	}
	return valid
}

// pass deletes the due SENT rows, then the due FAILED rows, for at most
// passBudget (nothing without the finished index), and logs what it deleted: INFO when it deleted rows, DEBUG
// otherwise (one line per pass, so at most one per RetentionInterval).
func (r *retention) pass(ctx context.Context) {
	d := r.d
	d.stats.retentionPasses.Add(1)
	if !r.indexReady(ctx) {
		return
	}
	until := d.cfg.now().Add(passBudget(d.cfg.RetentionInterval))
	var sent, failed int64
	skipped := false
	if !d.cfg.KeepSent {
		sent, skipped = r.purge(ctx, outbox.StatusSent, d.cfg.RetainSent, until)
	}
	if !skipped && d.cfg.RetainFailed > 0 {
		failed, skipped = r.purge(ctx, outbox.StatusFailed, d.cfg.RetainFailed, until)
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

// passBudget is how long a pass deletes before it ends and leaves the rest
// of its drain to the next pass: half the interval, at least a second. So
// a large backlog (the first pass after an upgrade) is deleted in steps,
// with a pause of at least RetentionInterval between them, never in
// back-to-back batches for hours.
func passBudget(interval time.Duration) time.Duration { return max(interval/2, time.Second) }

// purge deletes the rows of status older than age in batches until a
// batch comes back short, the pass's time runs out (until), the stop, an
// error, or another replica's batch holding the lock (skipped). It returns
// how many rows it deleted.
func (r *retention) purge(ctx context.Context, status outbox.Status, age time.Duration, until time.Time) (deleted int64, skipped bool) {
	dr := r.drains[status]
	if dr == nil {
		dr = &drain{limit: r.d.cfg.RetentionBatchSize}
		r.drains[status] = dr
	}
	for ctx.Err() == nil && r.d.cfg.now().Before(until) {
		res, err := r.batch(ctx, purge.Params{Status: status, OlderThan: age, Limit: dr.limit, After: dr.after, Exclusive: true})
		switch {
		case err != nil && ctx.Err() != nil: // cut short by the stop
			return deleted, false
		case err != nil:
			r.d.reportError("retention of "+string(status)+" rows failed", r.wrap(status, err))
			if !ranOutOfTime(err) || dr.limit == 1 {
				delete(r.drains, status)
				return deleted, false
			}
			dr.limit = max(1, dr.limit/2) // a smaller batch may fit
			continue
		case res.Skipped:
			delete(r.drains, status)
			return deleted, true
		}
		deleted += res.Deleted
		r.counter(status).Add(uint64(res.Deleted))
		if res.Deleted < int64(dr.limit) {
			delete(r.drains, status)
			return deleted, false
		}
		dr.after = res.Last
	}
	return deleted, false
}

// counter is the Stats counter of the rows of status deleted.
func (r *retention) counter(status outbox.Status) *metered {
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

// wrap names the retention, the status and the table in a batch's error,
// with what to do when the dispatcher's role may not delete.
func (r *retention) wrap(status outbox.Status, err error) error {
	hint := ""
	if pgerr.Code(err) == pgerr.InsufficientPrivilege {
		hint = "grant the dispatcher's role DELETE on the outbox table, or set KeepSent (and no RetainFailed) to keep rows"
	}
	return errtext.WrapHint(err, hint, "dispatcher: retention of %s rows of %s", status, r.d.cfg.Table.String())
}
