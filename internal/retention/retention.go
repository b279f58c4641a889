package retention

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
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
	cfg   *Config
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
	// unsummarized is set while summarizing the history's BRIN index
	// fails (logged once, until it succeeds again).
	unsummarized bool
}

// Config is what the retention job needs: the pool, the table, the
// dispatcher's retention settings, the bound of one statement, the clock,
// the logger, and callbacks for its counters and errors.
type Config struct {
	// Pool runs the job's statements, one connection at a time.
	Pool *pgxpool.Pool
	// Table is the outbox table.
	Table outbox.Table
	// RetainSent, RetainFailed, KeepSent, DeleteSent, RetentionInterval
	// and RetentionBatchSize are the dispatcher's settings of those names.
	RetainSent, RetainFailed, RetentionInterval time.Duration
	KeepSent, DeleteSent                        bool
	RetentionBatchSize                          int
	// OpTimeout bounds each statement, as each of the dispatcher's own
	// statements is bounded.
	OpTimeout time.Duration
	// Now is the clock that bounds a pass (passBudget).
	Now func() time.Time
	// Logger receives each pass's line and the job's warnings.
	Logger *slog.Logger
	// ErrorFunc reports an error the job goes on after (msg says what
	// failed).
	ErrorFunc func(msg string, err error)
	// PassFunc is called as each pass starts; SkippedFunc when a pass
	// ended early because another replica's batch held the lock.
	PassFunc, SkippedFunc func()
	// DeletedFunc counts rows of status deleted (n may be 0).
	DeletedFunc func(status outbox.Status, n int64)
	// BatchFunc, when set, is called after each batch that did not fail
	// (a test hook).
	BatchFunc func(status outbox.Status, limit int, res purge.Result)
}

// Job is the retention job of one dispatcher.
type Job struct {
	cfg Config
}

// New returns the Job of cfg; every field but BatchFunc is needed.
func New(cfg Config) *Job {
	return &Job{cfg: cfg}
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

// Run runs a retention pass every RetentionInterval, the first at a
// random point of the first interval, until ctx ends (the dispatcher ends
// it when its Run's context ends, when it stops its helpers, or when Stop
// is called); a pass cut short ends with its current batch cancelled.
func (j *Job) Run(ctx context.Context) {
	names, err := sqlname.For(j.cfg.Table) // validated by New
	if err != nil {
		j.cfg.ErrorFunc("retention", err)
		return
	}
	span := purge.Span(j.cfg.RetainSent)
	r := &retention{cfg: &j.cfg, names: names, store: purge.New(names), drains: map[outbox.Status]*drain{},
		span: span, ahead: partitionsAhead(span, j.cfg.RetentionInterval)}
	for wait := rand.N(j.cfg.RetentionInterval); tmplmigrate.Sleep(ctx, wait) == nil; wait = j.cfg.RetentionInterval {
		r.pass(ctx)
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
	c := r.cfg
	ctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	index := pgx.Identifier{c.Table.Schema, r.names.Object(sqlname.SuffixStrayIndex)}.Sanitize()
	var valid bool
	err := c.Pool.QueryRow(ctx, `SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)`,
		index).Scan(&valid)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		c.ErrorFunc("retention: check the stray index", errtext.Wrap(err, "dispatcher: retention: check index %s", index))
		return false
	case !valid && !r.warned:
		r.warned = true
		c.Logger.Warn("pgoutbox: retention skipped: the stray index is missing or invalid; run migrations.Migrate",
			"table", c.Table.String(), "index", index)
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
	c := r.cfg
	c.PassFunc()
	if !r.indexReady(ctx) {
		return
	}
	until := c.Now().Add(passBudget(c.RetentionInterval))
	var o passOutcome
	r.ensure(ctx, &o)
	if r.maySweep(ctx) {
		o.swept = r.sweep(ctx, until)
	}
	r.retire(ctx, &o)
	r.summarize(ctx)
	if !c.KeepSent && ctx.Err() == nil {
		var n int64
		n, o.skipped = r.purge(ctx, outbox.StatusSent, c.RetainSent, until)
		o.sent += n
	}
	if !o.skipped && c.RetainFailed > 0 {
		o.failed, o.skipped = r.purge(ctx, outbox.StatusFailed, c.RetainFailed, until)
	}
	if o.skipped {
		c.SkippedFunc()
	}
	level := slog.LevelDebug
	if o.sent+o.failed > 0 || o.swept+o.dropped > 0 {
		level = slog.LevelInfo
	}
	c.Logger.Log(context.WithoutCancel(ctx), level, "pgoutbox: retention pass", "table", c.Table.String(),
		"deleted_sent", o.sent, "deleted_failed", o.failed, "other_replica_deleting", o.skipped,
		"swept", o.swept, "partitions_created", o.created, "partitions_dropped", o.dropped, "history_busy", o.busy)
}

// sweep moves strays in batches of RetentionBatchSize until a batch
// comes back short, the pass's time runs out, the stop or an error, and
// returns how many it moved.
func (r *retention) sweep(ctx context.Context, until time.Time) (moved int) {
	c := r.cfg
	for ctx.Err() == nil && c.Now().Before(until) {
		opCtx, cancel := context.WithTimeout(ctx, c.OpTimeout)
		n, err := purge.Sweep(opCtx, c.Pool, r.names, c.RetentionBatchSize)
		cancel()
		moved += n
		switch {
		case err != nil && ctx.Err() != nil:
			return moved
		case err != nil:
			c.ErrorFunc("retention: sweep failed", errtext.WrapHint(err, privilegeHint(err),
				"dispatcher: retention: sweep %s", c.Table.String()))
			return moved
		case n < c.RetentionBatchSize:
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
	c := r.cfg
	if r.unswept {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	var may bool
	err := c.Pool.QueryRow(ctx, `SELECT has_table_privilege($1, 'DELETE') AND has_table_privilege($2, 'INSERT')
	AND has_table_privilege($3, 'INSERT')`, r.names.Qualified, r.names.Sent, r.names.Dead).Scan(&may)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		c.ErrorFunc("retention: check the sweep's privileges", errtext.Wrap(err, "dispatcher: retention: check privileges on %s", c.Table.String()))
		return false
	case !may:
		r.unswept = true
		c.Logger.Warn("pgoutbox: retention leaves SENT and FAILED rows in the outbox table: the dispatcher's role may not DELETE "+
			"from it or INSERT into the history and the dead letters", "table", c.Table.String())
	}
	return may
}

// ensure creates the history's partitions ahead, before the sweep so
// that the SENT strays it moves land in them (not with both DeleteSent
// and KeepSent: no history is kept). A busy history (a lock not free in
// time) is left for the next pass.
func (r *retention) ensure(ctx context.Context, o *passOutcome) {
	c := r.cfg
	if ctx.Err() != nil || c.DeleteSent && c.KeepSent {
		return
	}
	opCtx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	created, err := purge.EnsurePartitions(opCtx, c.Pool, r.names, r.span, time.Time{}, r.ahead)
	o.created = created
	r.partitionError(ctx, o, err, "create")
}

// summarize summarizes the full block ranges of the history's BRIN index
// on sent_at that no VACUUM summarized yet (<table>_sent_summarize,
// schema version 13), so that admin.Activity's count of recent SENT
// events reads a range or two rather than every unsummarized page of
// the current partition. Best effort, once a pass: a failure (a schema
// older than 13, a role without EXECUTE) is logged once, as a WARN, and
// the next passes try again.
func (r *retention) summarize(ctx context.Context) {
	c := r.cfg
	if ctx.Err() != nil || c.DeleteSent && c.KeepSent {
		return
	}
	opCtx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	_, err := c.Pool.Exec(opCtx, `SELECT `+r.names.Function(sqlname.SuffixSentSummarize)+`()`)
	switch {
	case err == nil:
		r.unsummarized = false
	case ctx.Err() != nil || r.unsummarized:
	default:
		r.unsummarized = true
		c.Logger.Warn("pgoutbox: retention could not summarize the SENT history's BRIN index; admin.Activity reads more of the history "+
			"until VACUUM does (migrate to schema version 13; grant EXECUTE on "+r.names.SentSummarizeSignature()+", see migrations.RenderGrants)",
			"table", c.Table.String(), "error", err)
	}
}

// EnsureAtStart creates the history's partitions ahead once,
// before the first claim, so that the first completions land in a time
// partition rather than in the default partition (whose rows would then
// block that range's partition). Best effort: a busy history or another
// error is logged, and the retention passes try again.
func (j *Job) EnsureAtStart(ctx context.Context, names sqlname.Names) {
	if j.cfg.DeleteSent && j.cfg.KeepSent {
		return
	}
	opCtx, cancel := context.WithTimeout(ctx, j.cfg.OpTimeout)
	defer cancel()
	span := purge.Span(j.cfg.RetainSent)
	_, err := purge.EnsurePartitions(opCtx, j.cfg.Pool, names, span, time.Time{}, partitionsAhead(span, j.cfg.RetentionInterval))
	if err != nil && ctx.Err() == nil {
		j.cfg.Logger.Warn("pgoutbox: could not create the SENT history's partitions at start; the retention passes try again",
			"table", j.cfg.Table.String(), "busy", errors.Is(err, purge.ErrBusy), "error", err)
	}
}

// retire drops the history's partitions older than RetainSent (not with
// KeepSent), counting their rows as SENT rows deleted.
func (r *retention) retire(ctx context.Context, o *passOutcome) {
	c := r.cfg
	if ctx.Err() != nil || c.KeepSent {
		return
	}
	opCtx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	var before time.Time
	err := c.Pool.QueryRow(opCtx, `SELECT now() - $1::bigint * interval '1 microsecond'`, c.RetainSent.Microseconds()).Scan(&before)
	if r.partitionError(ctx, o, err, "retire") {
		return
	}
	ret, err := purge.RetireHistory(opCtx, c.Pool, r.names, before)
	o.dropped = ret.Partitions
	o.sent += ret.Rows
	c.DeletedFunc(outbox.StatusSent, ret.Rows)
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
		r.cfg.ErrorFunc("retention: "+what+" history partitions failed", errtext.WrapHint(err, privilegeHint(err),
			"dispatcher: retention: %s partitions of the SENT history of %s", what, r.cfg.Table.String()))
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
		dr = &drain{limit: r.cfg.RetentionBatchSize}
		r.drains[status] = dr
	}
	for ctx.Err() == nil && r.cfg.Now().Before(until) {
		res, err := r.batch(ctx, purge.Params{Status: status, OlderThan: age, Limit: dr.limit, After: dr.after, Exclusive: true})
		switch {
		case err != nil && ctx.Err() != nil: // cut short by the stop
			return deleted, false
		case err != nil:
			r.cfg.ErrorFunc("retention of "+string(status)+" rows failed", r.wrap(status, err))
			if !pgerr.RanOutOfTime(err) || dr.limit == 1 {
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
		r.cfg.DeletedFunc(status, res.Deleted)
		if res.Deleted < int64(dr.limit) {
			delete(r.drains, status)
			return deleted, false
		}
		dr.after = res.Last
	}
	return deleted, false
}

// batch runs one bounded DELETE.
func (r *retention) batch(ctx context.Context, p purge.Params) (purge.Result, error) {
	c := r.cfg
	ctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	res, err := r.store.Delete(ctx, c.Pool, p)
	if err == nil && c.BatchFunc != nil {
		c.BatchFunc(p.Status, p.Limit, res)
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
	return errtext.WrapHint(err, hint, "dispatcher: retention of %s rows of %s", status, r.cfg.Table.String())
}
