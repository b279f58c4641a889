package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
	"github.com/pgoutbox/pgoutbox/outbox"
)

//go:embed *.sql
var files embed.FS

//go:embed log/*.sql
var logEmbed embed.FS

// logFiles is the log kind's templates (outbox.KindLog), at the root of
// their own file system as tern reads them.
var logFiles = func() fs.FS {
	sub, err := fs.Sub(logEmbed, "log")
	if err != nil {
		panic(err)
	}
	return sub
}()

// LogFS is the log kind's migration templates (outbox.KindLog), as [FS]
// is the outbox's: they version on their own, in the log's own
// <table>_schema_version.
var LogFS fs.FS = logFiles

// FS is the migration templates as tern reads them: NNN_name.sql files whose
// names in double braces are filled in by [Migrate] or [Render].
var FS fs.FS = files

// Conn is what [Migrate], [Version] and [Verify] run on: the *pgx.Conn or
// the *pgxpool.Pool a program already holds. Given a pool, they acquire
// one connection for the call (Migrate holds a session advisory lock on
// it) and release it after. Either way it must reach PostgreSQL directly,
// not through a transaction-mode pooler. A nil one gives an
// *outbox.InputError naming "conn", and nothing is touched.
type Conn interface{ *pgx.Conn | *pgxpool.Pool }

// Config says which outbox to migrate or verify.
type Config struct {
	// Table is the outbox's schema and table name. Defaults to
	// public.outbox_events.
	Table outbox.Table
	// LockTimeout bounds how long [Migrate] waits for the advisory locks
	// that serialize migrations (one keyed by Table, and tern's, which
	// every tern migration in the database takes). When another session
	// holds one for longer, Migrate returns a *[LockError]
	// naming that session's backend, and changes nothing. Zero means one
	// minute, longer than a migration that retries a locked table takes;
	// a negative value, or one above [MaxLockTimeout], gives an
	// *outbox.ConfigError naming "LockTimeout".
	// It bounds [Verify] too: its wait for a lock on the table or its
	// indexes (see [VerifyLockError]).
	LockTimeout time.Duration
	// KeyOrder keeps the outbox table's per-key order index
	// (<table>_order_idx), which dispatchers with Ordering PerKey need:
	// without it they build it at Start when their role owns the table
	// (CREATE INDEX CONCURRENTLY) and refuse to start otherwise
	// (dispatcher.OrderIndexError).
	// It costs every keyed event (AggregateID or PartitionKey set) one
	// index entry at insert, at its claim and at each retry (about 3 WAL
	// records per event of the 13 of an unkeyed one); events without a key
	// pay nothing for it. Defaults to false: schema version 12 drops the
	// index.
	//
	// Turned on, [Migrate] builds the index when it is missing, after the
	// migrations, with CREATE INDEX CONCURRENTLY (Emit and dispatchers go
	// on meanwhile; on a large table it takes a while). Turned off, Migrate
	// leaves an index that exists alone (a replica that migrates without
	// the option must not take it from running ordered dispatchers): drop
	// it with DROP INDEX CONCURRENTLY (docs/ordering.md). Set it before an
	// upgrade to version 12 if any dispatcher uses PerKey; [Render] writes
	// version 12 for one choice or the other.
	KeyOrder bool
	// Kind says which schema Table gets: outbox.KindOutbox (the default),
	// the dispatcher's outbox table with its dead letters and SENT
	// history, or outbox.KindLog, the relay's append-only log with its
	// ticks, cursors and parked events (docs/relay.md). The two kinds
	// version independently; one database may hold both, under different
	// table names. KeyOrder applies to the outbox kind only.
	Kind outbox.TableKind
}

// Migrate creates or upgrades the outbox schema on conn to the latest
// version (a log's, [LatestLog], when cfg.Kind is outbox.KindLog: see
// the package documentation; what follows about the SENT history and the
// order index is the outbox's only). It is idempotent, and safe when several processes call it at
// once (see the package documentation). It needs a direct connection, not
// one behind a transaction-mode pooler.
//
// Each migration runs in a transaction of its own, and one that alters the
// table waits at most 2s (lock_timeout) for its lock, since writers of the
// table queue behind it meanwhile. When the lock was not free in time,
// Migrate tries that migration again, 5 attempts in all with pauses of
// 0.5s doubling, stopping early when ctx ends; then it returns an error
// that says another transaction holds a lock on the table and wraps the
// *pgconn.PgError (SQLSTATE 55P03). The migrations applied before it stay.
//
// Before any of that it takes two session advisory locks (see the package
// documentation), waiting at most cfg.LockTimeout (default one minute) for
// them; a lock held longer, for example by an idle server connection of a
// transaction-mode pooler that once ran Migrate, gives an
// *[LockError] naming the holding backend (pid,
// application_name, client address, state), which
// SELECT pg_terminate_backend(pid) ends. It creates the schema only when
// it is missing, so a migrator that owns an existing schema needs no
// CREATE privilege on the database.
//
// Once the latest version is applied, and after those locks are
// released, it creates the SENT history's one-minute time partitions up
// to two minutes ahead (the dispatchers create their own span's after
// them), and moves the SENT and FAILED rows still in the outbox table
// (an upgrade from version 9 leaves its SENT rows there) to the SENT
// history and the dead letters: it first creates the history's time
// partitions from the oldest such row's sent_at on (when the history
// stays locked, it returns an error wrapping purge's busy error and
// moves nothing; run it again), then moves them in
// transactions of 10,000 rows until none is left, while Emit, claims
// and completions go on (1,000,000 rows took 52 s to 2 min on a loaded
// 2-core machine, see docs/operations.md, "The upgrade's sweep,
// measured"). A Migrate that finds nothing to move and the partitions
// there costs a few queries.
//
// With cfg.KeyOrder, before that sweep, it makes sure the order index
// exists and is valid: it drops an INVALID one (a concurrent build that
// failed) and builds it with CREATE INDEX CONCURRENTLY, which blocks no
// write but waits for the transactions open in the database while it
// builds (a session idle in a transaction holds it up), one Migrate of
// the table at a time: another one waits for it (until ctx ends) and
// then finds the index valid (see [Config].KeyOrder).
func Migrate[C Conn](ctx context.Context, conn C, cfg Config) error {
	set, err := migrationSet(cfg)
	if err != nil {
		return err
	}
	return tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) error {
		if err := tmplmigrate.Migrate(ctx, c, set); err != nil {
			return err
		}
		if cfg.Kind == outbox.KindLog {
			return nil
		}
		if cfg.KeyOrder {
			if err := ensureKeyOrder(ctx, c, set.Names); err != nil {
				return err
			}
		}
		return sweepStrays(ctx, c, set.Names)
	})
}

// sweepStrays creates the history's one-minute time partitions up to two
// minutes ahead (a fresh outbox's first completions land in them, not in the
// default partition, whose rows would block those ranges' partitions),
// then moves the SENT and FAILED rows left in the outbox table (the SENT
// rows of schema version 9, and what a dispatcher of version 9 still
// running writes) to the history and the dead letters, after the
// migration locks were released. The partitions start at the oldest
// stray's sent_at (ranges of at most purge.MaxRange for the past, then
// of a minute), so that the moved rows land
// in partitions retention drops; when the history stays busy and there
// are strays, it fails (ErrBusy) rather than sweep them into the default
// partition. The sweep runs in batches of purge.SweepBatch, each its own
// transaction, until none is left. Emit, claims and completions go on
// meanwhile (a batch locks only the rows it moves).
func sweepStrays(ctx context.Context, c *pgx.Conn, names sqlname.Names) error {
	oldest, found, err := purge.OldestStray(ctx, c, names)
	if err != nil {
		return errtext.Wrap(err, "migrations: find the SENT rows left in %s", names.Table)
	}
	if !found {
		// Nothing to sweep: partitions only for a history that has
		// none yet (a fresh install), so that a Migrate at every deploy
		// does not pile up empty minute partitions where no dispatcher
		// retires them (DeleteSent with KeepSent); the dispatchers
		// create their own span's.
		parts, err := purge.Partitions(ctx, c, names)
		if err != nil || len(parts) > 0 {
			return errtext.Wrap(err, "migrations: list the time partitions of %s", names.Sent)
		}
		oldest = time.Time{}
	}
	if err := ensurePartitions(ctx, c, names, oldest); err != nil {
		if !found && errors.Is(err, purge.ErrBusy) {
			return nil // nothing to sweep: the dispatchers' retention creates them
		}
		return errtext.Wrap(err, "migrations: create the time partitions of %s before moving the SENT rows left in %s "+
			"(nothing was moved; run Migrate again once the history is not locked)", names.Sent, names.Table)
	}
	for {
		n, err := purge.Sweep(ctx, c, names, purge.SweepBatch)
		if err != nil || n == 0 {
			return errtext.Wrap(err, "migrations")
		}
	}
}

// Version returns the schema version applied to the outbox on conn, or 0
// when it has never been migrated. It reads a log (cfg.Kind
// outbox.KindLog) the same way: each kind keeps its version in
// <table>_schema_version; compare it with [LatestFor] of the kind.
func Version[C Conn](ctx context.Context, conn C, cfg Config) (int32, error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return 0, err
	}
	var v int32
	err = tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) (err error) {
		v, err = tmplmigrate.Version(ctx, c, names.VersionTable)
		return err
	})
	return v, err
}

// Latest returns the newest schema version of the outbox kind this
// library ships; [LatestLog] is the log's, and [LatestFor] either.
func Latest() int32 { return tmplmigrate.Latest(files) }

// migrationSet is the templates of cfg's kind with cfg's names filled in.
func migrationSet(cfg Config) (tmplmigrate.Set, error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return tmplmigrate.Set{}, err
	}
	if err := checkLockTimeout(cfg.LockTimeout); err != nil {
		return tmplmigrate.Set{}, err
	}
	if err := checkKind(cfg.Kind); err != nil {
		return tmplmigrate.Set{}, err
	}
	if cfg.Kind == outbox.KindLog {
		return tmplmigrate.Set{FS: logFiles, Names: names, Data: logTemplateData(names), LockWait: cfg.LockTimeout}, nil
	}
	return tmplmigrate.Set{FS: files, Names: names, Data: templateData(names, cfg.KeyOrder), LockWait: cfg.LockTimeout}, nil
}

// migrateSpan is the span of the partitions Migrate creates: the
// shortest, one minute. Migrate does not know the dispatchers'
// RetainSent, and a longer partition created ahead holds its range for
// its whole span: with six-hour partitions (the default RetainSent's),
// a dispatcher retaining 4 minutes found the next 12 to 18 hours taken
// and retired nothing for hours. The dispatchers create their own
// span's partitions after these at Start and in every retention pass.
const migrateSpan = time.Minute

// ensurePartitions creates the history's partitions from oldest (now
// when zero) to two minutes ahead (migrateSpan), trying again (5
// attempts, 0.5s apart) while the history is busy; then it returns the
// error, which wraps purge.ErrBusy.
func ensurePartitions(ctx context.Context, c *pgx.Conn, names sqlname.Names, oldest time.Time) error {
	span := migrateSpan
	for attempt := 1; ; attempt++ {
		_, err := purge.EnsurePartitions(ctx, c, names, span, oldest, 2*span)
		if err == nil || !errors.Is(err, purge.ErrBusy) || attempt == 5 {
			return err
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
}

// checkKind rejects a Config.Kind that is neither outbox.KindOutbox nor
// outbox.KindLog.
func checkKind(k outbox.TableKind) error {
	if k != outbox.KindOutbox && k != outbox.KindLog {
		return &outbox.ConfigError{Field: "Kind", Reason: fmt.Sprintf("is %s, want outbox.KindOutbox or outbox.KindLog", k)}
	}
	return nil
}

// MaxLockTimeout is the longest Config.LockTimeout: PostgreSQL's largest
// lock_timeout, 2^31-1 milliseconds (about 24.8 days).
const MaxLockTimeout = math.MaxInt32 * time.Millisecond

// checkLockTimeout rejects a LockTimeout PostgreSQL's lock_timeout cannot
// hold.
func checkLockTimeout(d time.Duration) error {
	if d < 0 {
		return &outbox.ConfigError{Field: "LockTimeout", Reason: "must not be negative"}
	}
	if d > MaxLockTimeout {
		return &outbox.ConfigError{Field: "LockTimeout", Reason: fmt.Sprintf("is %s, at most %s (PostgreSQL's largest lock_timeout)", d, MaxLockTimeout)}
	}
	return nil
}

// templateData is what the migration templates see: every name quoted,
// and key_order, Config.KeyOrder (migration 012 keeps the order index).
func templateData(n sqlname.Names, keyOrder bool) map[string]any {
	return map[string]any{
		"key_order":      keyOrder,
		"schema":         n.Schema,
		"table":          n.Qualified,
		"pkey":           n.Quoted(sqlname.SuffixPkey),
		"status_check":   n.Quoted(sqlname.SuffixStatusCheck),
		"lease_check":    n.Quoted(sqlname.SuffixLeaseCheck),
		"attempts_check": n.Quoted(sqlname.SuffixAttemptsCheck),
		"log_check":      n.Quoted(sqlname.SuffixLogCheck),
		"error_check":    n.Quoted(sqlname.SuffixErrorCheck),
		"due_idx":        n.Quoted(sqlname.SuffixDueIndex),
		"lease_idx":      n.Quoted(sqlname.SuffixLeaseIndex),
		"finished_idx":   n.Quoted(sqlname.SuffixFinishedIndex),
		"seq_idx":        n.Quoted(sqlname.SuffixSeqIndex),
		"type_idx":       n.Quoted(sqlname.SuffixTypeIndex),
		"aggregate_idx":  n.Quoted(sqlname.SuffixAggIndex),
		"code_idx":       n.Quoted(sqlname.SuffixCodeIndex),
		"failed_idx":     n.Quoted(sqlname.SuffixFailedIndex),
		"type_due_idx":   n.Quoted(sqlname.SuffixTypeDueIndex),
		"order_idx":      n.Quoted(sqlname.SuffixOrderIndex),
		"seq_list_idx":   n.Quoted(sqlname.SuffixSeqListIndex),
		"type_list_idx":  n.Quoted(sqlname.SuffixTypeListIndex),
		"agg_list_idx":   n.Quoted(sqlname.SuffixAggListIndex),
		"code_list_idx":  n.Quoted(sqlname.SuffixCodeListIndex),
		"held_idx":       n.Quoted(sqlname.SuffixHeldIndex),
		"stray_idx":      n.Quoted(sqlname.SuffixStrayIndex),
		"dead":           n.Dead,
		"dead_pkey":      n.Quoted(sqlname.SuffixDeadPkey),
		"dead_check":     n.Quoted(sqlname.SuffixDeadCheck),
		"dead_seq_idx":   n.Quoted(sqlname.SuffixDeadSeqIndex),
		"dead_type_idx":  n.Quoted(sqlname.SuffixDeadTypeIndex),
		"dead_agg_idx":   n.Quoted(sqlname.SuffixDeadAggIndex),
		"dead_code_idx":  n.Quoted(sqlname.SuffixDeadCodeIndex),
		"dead_time_idx":  n.Quoted(sqlname.SuffixDeadTimeIndex),
		"dead_order_idx": n.Quoted(sqlname.SuffixDeadOrderIndex),
		"sent":           n.Sent,
		"sent_check":     n.Quoted(sqlname.SuffixSentCheck),
		"sent_default":   pgx.Identifier{n.Table.Schema, n.Object(sqlname.SuffixSentDefault)}.Sanitize(),
		"sent_id_idx":    n.Quoted(sqlname.SuffixSentIDIndex),
		"sent_seq_idx":   n.Quoted(sqlname.SuffixSentSeqIndex),
		"sent_type_idx":  n.Quoted(sqlname.SuffixSentTypeIndex),
		"sent_agg_idx":   n.Quoted(sqlname.SuffixSentAggIndex),
		"sent_def_idx":   n.Quoted(sqlname.SuffixSentDefaultIndex),
		"sent_add":       n.Function(sqlname.SuffixSentAdd),
		"sent_drop":      n.Function(sqlname.SuffixSentDrop),
		"sent_time_idx":  n.Quoted(sqlname.SuffixSentTimeIndex),
		"audit":          n.Audit,
		"audit_pkey":     n.Quoted(sqlname.SuffixAuditPkey),
		"audit_time_idx": n.Quoted(sqlname.SuffixAuditTimeIndex),
		"audit_req_idx":  n.Quoted(sqlname.SuffixAuditRequestIndex),
		"sent_summarize": n.Function(sqlname.SuffixSentSummarize),
		"sent_time_lit":  literal(pgx.Identifier{n.Table.Schema, n.Object(sqlname.SuffixSentTimeIndex)}.Sanitize()),
		// Literals baked into the partition functions' bodies.
		"sent_lit":        literal(n.Sent),
		"schema_lit":      literal(n.Table.Schema),
		"name_lit":        literal(n.Table.Name),
		"partitions_lock": literal(purge.LockKey(n)),
	}
}

// literal is s as an SQL string literal (standard_conforming_strings).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// logTemplateData is what the log kind's templates see: every name
// quoted, the literals baked into its functions' bodies, and the width of
// a part.
func logTemplateData(n sqlname.Names) map[string]any {
	return map[string]any{
		"schema":         n.Schema,
		"log":            n.Qualified,
		"log_xid_idx":    n.Quoted(sqlname.SuffixLogXidIndex),
		"ticks":          n.Log(sqlname.SuffixTicks),
		"ticker":         n.Log(sqlname.SuffixTicker),
		"cursors":        n.Log(sqlname.SuffixCursors),
		"parked":         n.Log(sqlname.SuffixParked),
		"parked_keys":    n.Log(sqlname.SuffixParkedKeys),
		"parked_key_idx": n.Quoted(sqlname.SuffixParkedKeyIdx),
		"tick":           n.Function(sqlname.SuffixTick),
		"part_add":       n.Function(sqlname.SuffixPartAdd),
		"part_truncate":  n.Function(sqlname.SuffixPartTruncate),
		"tick_trim":      n.Function(sqlname.SuffixTickTrim),
		"part_xids":      sqlname.LogPartXids,
		"log_lit":        literal(n.Qualified),
		"schema_lit":     literal(n.Table.Schema),
		"name_lit":       literal(n.Table.Name),
	}
}
