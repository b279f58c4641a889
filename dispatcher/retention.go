package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// retention is the state of the retention job. Each pass moves the
// strays out of the outbox table (purge.Sweep), creates the SENT
// history's time partitions ahead of need, drops those older than
// RetainSent (unless KeepSent) with the rows of the history's default
// partition older than it, and deletes FAILED rows older than
// RetainFailed (when set). It runs on a goroutine of its own, on one
// pool connection at a time, never in a claim or completion statement
// and never holding a handler slot. Each deleting batch is one statement
// under a transaction-level advisory lock (see internal/purge), so one
// replica at a time deletes, also through a transaction-mode pooler; the
// partition work has a lock of its own, waited for at most
// purge.LockTimeout.
type retention struct {
	d     *Dispatcher
	names sqlname.Names
	store *purge.Store
	// span and ahead are the history's partition length (purge.Span of
	// RetainSent) and how far ahead of now the pass creates partitions.
	span, ahead time.Duration
	// drains holds, by status, the drain a pass left unfinished when its
	// time ran out: the next pass goes on with it.
	drains map[outbox.Status]*drain
	// warned is set once the missing stray index has been logged.
	warned bool
	// unswept is set once the pass found that the role may not move
	// strays (and logged it): the pass then leaves them alone.
	unswept bool
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
	// there (purge.Params.After).
	after time.Time
}

// retain runs a retention pass every RetentionInterval, the first at a
// random point of the first interval, until runCtx or quit ends or Stop
// is called; a pass cut short ends with its current batch cancelled.
func (d *Dispatcher) retain(runCtx, quit context.Context) {
	names, err := sqlname.For(d.cfg.Table) // validated by New
	if err != nil {
		d.report.Error("retention", err)
		return
	}
	ctx, cancel := d.untilStop(quit)
	defer cancel()
	defer context.AfterFunc(runCtx, cancel)()
	span := purge.Span(d.cfg.RetainSent)
	r := &retention{d: d, names: names, store: purge.New(names), drains: map[outbox.Status]*drain{},
		span: span, ahead: partitionsAhead(span, d.cfg.RetentionInterval)}
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

// partitionsAhead is how far ahead of now a pass creates the history's
// partitions: two spans and two retention intervals, so that a pass or
// two may fail or be late before a completion finds no partition, but
// at most 48 spans (a short retention with a long interval: completions
// beyond them go to the default partition, whose rows are deleted in
// batches).
func partitionsAhead(span, interval time.Duration) time.Duration {
	return min(2*span+2*interval, 48*span)
}

// indexReady reports whether the table's stray index (migration 011)
// exists and is valid. Without it each sweep would scan the whole outbox
// table, so the pass is skipped, with one WARN the first time.
func (r *retention) indexReady(ctx context.Context) bool {
	d := r.d
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	index := pgx.Identifier{d.cfg.Table.Schema, r.names.Object(sqlname.SuffixStrayIndex)}.Sanitize()
	var valid bool
	err := d.pool.QueryRow(ctx, `SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)`,
		index).Scan(&valid)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		d.report.Error("retention: check the stray index", errtext.Wrap(err, "dispatcher: retention: check index %s", index))
		return false
	case !valid && !r.warned:
		r.warned = true
		d.cfg.Logger.Warn("pgoutbox: retention skipped: the stray index is missing or invalid; run migrations.Migrate",
			"table", d.cfg.Table.String(), "index", index)
	}
	return valid
}

// passOutcome is what one pass did, for its log line.
type passOutcome struct {
	swept, created, dropped int
	sent, failed            int64
	skipped, busy           bool
}

// pass creates the history's partitions ahead, sweeps the strays, drops
// the due partitions, then deletes the due rows of the default
// partition and the due dead letters, for at most passBudget (nothing
// without the stray index), and logs what it did: INFO when it moved,
// dropped or deleted rows, DEBUG otherwise (one line per pass, so at
// most one per RetentionInterval).
func (r *retention) pass(ctx context.Context) {
	d := r.d
	d.report.Counters.RetentionPasses.Add(1)
	if !r.indexReady(ctx) {
		return
	}
	until := d.cfg.now().Add(passBudget(d.cfg.RetentionInterval))
	var o passOutcome
	r.ensure(ctx, &o)
	if r.maySweep(ctx) {
		o.swept = r.sweep(ctx, until)
	}
	r.retire(ctx, &o)
	if !d.cfg.KeepSent && ctx.Err() == nil {
		var n int64
		n, o.skipped = r.purge(ctx, outbox.StatusSent, d.cfg.RetainSent, until)
		o.sent += n
	}
	if !o.skipped && d.cfg.RetainFailed > 0 {
		o.failed, o.skipped = r.purge(ctx, outbox.StatusFailed, d.cfg.RetainFailed, until)
	}
	if o.skipped {
		d.report.Counters.RetentionSkipped.Add(1)
	}
	level := slog.LevelDebug
	if o.sent+o.failed > 0 || o.swept+o.dropped > 0 {
		level = slog.LevelInfo
	}
	d.cfg.Logger.Log(d.dbCtx, level, "pgoutbox: retention pass", "table", d.cfg.Table.String(),
		"deleted_sent", o.sent, "deleted_failed", o.failed, "other_replica_deleting", o.skipped,
		"swept", o.swept, "partitions_created", o.created, "partitions_dropped", o.dropped, "history_busy", o.busy)
}

// sweep moves strays in batches of RetentionBatchSize until a batch
// comes back short, the pass's time runs out, the stop or an error, and
// returns how many it moved.
func (r *retention) sweep(ctx context.Context, until time.Time) (moved int) {
	d := r.d
	for ctx.Err() == nil && d.cfg.now().Before(until) {
		opCtx, cancel := d.opContextFrom(ctx)
		n, err := purge.Sweep(opCtx, d.pool, r.names, d.cfg.RetentionBatchSize)
		cancel()
		moved += n
		switch {
		case err != nil && ctx.Err() != nil:
			return moved
		case err != nil:
			d.report.Error("retention: sweep failed", errtext.WrapHint(err, privilegeHint(err),
				"dispatcher: retention: sweep %s", d.cfg.Table.String()))
			return moved
		case n < d.cfg.RetentionBatchSize:
			return moved
		}
	}
	return moved
}

// maySweep reports whether the dispatcher's role may move strays:
// DELETE on the outbox table, INSERT on the history and the dead
// letters. Without them the pass logs one WARN and leaves the strays
// where they are.
func (r *retention) maySweep(ctx context.Context) bool {
	d := r.d
	if r.unswept {
		return false
	}
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	var may bool
	err := d.pool.QueryRow(ctx, `SELECT has_table_privilege($1, 'DELETE') AND has_table_privilege($2, 'INSERT')
	AND has_table_privilege($3, 'INSERT')`, r.names.Qualified, r.names.Sent, r.names.Dead).Scan(&may)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		d.report.Error("retention: check the sweep's privileges", errtext.Wrap(err, "dispatcher: retention: check privileges on %s", d.cfg.Table.String()))
		return false
	case !may:
		r.unswept = true
		d.cfg.Logger.Warn("pgoutbox: retention leaves SENT and FAILED rows in the outbox table: the dispatcher's role may not DELETE "+
			"from it or INSERT into the history and the dead letters", "table", d.cfg.Table.String())
	}
	return may
}

// ensure creates the history's partitions ahead, before the sweep so
// that the SENT strays it moves land in them (not with both DeleteSent
// and KeepSent: no history is kept). A busy history (a lock not free in
// time) is left for the next pass.
func (r *retention) ensure(ctx context.Context, o *passOutcome) {
	d := r.d
	if ctx.Err() != nil || d.cfg.DeleteSent && d.cfg.KeepSent {
		return
	}
	opCtx, cancel := d.opContextFrom(ctx)
	defer cancel()
	created, err := purge.EnsurePartitions(opCtx, d.pool, r.names, r.span, time.Time{}, r.ahead)
	o.created = created
	r.partitionError(ctx, o, err, "create")
}

// ensurePartitionsAtStart creates the history's partitions ahead once,
// before the first claim, so that the first completions land in a time
// partition rather than in the default partition (whose rows would then
// block that range's partition). Best effort: a busy history or another
// error is logged, and the retention passes try again.
func (d *Dispatcher) ensurePartitionsAtStart(ctx context.Context, names sqlname.Names) {
	if d.cfg.DeleteSent && d.cfg.KeepSent {
		return
	}
	opCtx, cancel := d.opContextFrom(ctx)
	defer cancel()
	span := purge.Span(d.cfg.RetainSent)
	_, err := purge.EnsurePartitions(opCtx, d.pool, names, span, time.Time{}, partitionsAhead(span, d.cfg.RetentionInterval))
	if err != nil && ctx.Err() == nil {
		d.cfg.Logger.Warn("pgoutbox: could not create the SENT history's partitions at start; the retention passes try again",
			"table", d.cfg.Table.String(), "busy", errors.Is(err, purge.ErrBusy), "error", err)
	}
}

// retire drops the history's partitions older than RetainSent (not with
// KeepSent), counting their rows as SENT rows deleted.
func (r *retention) retire(ctx context.Context, o *passOutcome) {
	d := r.d
	if ctx.Err() != nil || d.cfg.KeepSent {
		return
	}
	opCtx, cancel := d.opContextFrom(ctx)
	defer cancel()
	var before time.Time
	err := d.pool.QueryRow(opCtx, `SELECT now() - $1::bigint * interval '1 microsecond'`, d.cfg.RetainSent.Microseconds()).Scan(&before)
	if r.partitionError(ctx, o, err, "retire") {
		return
	}
	ret, err := purge.RetireHistory(opCtx, d.pool, r.names, before)
	o.dropped = ret.Partitions
	o.sent += ret.Rows
	r.counter(outbox.StatusSent).Add(uint64(ret.Rows))
	r.partitionError(ctx, o, err, "retire")
}

// partitionError reports err (creating or retiring partitions) unless it
// is nil, the stop's or a busy history's (o.busy), and says whether there
// was one.
func (r *retention) partitionError(ctx context.Context, o *passOutcome, err error, what string) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, purge.ErrBusy):
		o.busy = true
	case ctx.Err() == nil:
		r.d.report.Error("retention: "+what+" history partitions failed", errtext.WrapHint(err, privilegeHint(err),
			"dispatcher: retention: %s partitions of the SENT history of %s", what, r.d.cfg.Table.String()))
	}
	return true
}

// privilegeHint says what to grant when err is a permission error of the
// sweep or the partition work.
func privilegeHint(err error) string {
	if pgerr.Code(err) != pgerr.InsufficientPrivilege {
		return ""
	}
	return "the dispatcher's role needs DELETE on the outbox table, INSERT on the dead letters and the history, " +
		"and, for the history's partitions, EXECUTE on its partition functions <table>_sent_add and <table>_sent_drop (see migrations.RenderGrants)"
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
			r.d.report.Error("retention of "+string(status)+" rows failed", r.wrap(status, err))
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
func (r *retention) counter(status outbox.Status) *report.Metered {
	if status == outbox.StatusFailed {
		return &r.d.report.Counters.RetentionFailed
	}
	return &r.d.report.Counters.RetentionSent
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
		hint = "grant the dispatcher's role DELETE on the dead letters and the SENT history, or set KeepSent (and no RetainFailed) to keep rows"
	}
	return errtext.WrapHint(err, hint, "dispatcher: retention of %s rows of %s", status, r.d.cfg.Table.String())
}
