package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// insertAged commits n rows in status into the outbox table, whose
// sent_at and failed_at are age ago (database clock), whatever the
// status: a row that is not SENT or FAILED must stay however old these
// columns say it is. PENDING rows are due in an hour (no dispatcher
// claims them), PROCESSING rows hold a lease for an hour. SENT and
// FAILED rows are strays (as an upgrade from version 9 or a dispatcher
// of version 9 leaves them): the retention pass sweeps them into the
// history (its default partition, for old ones: no time partition covers
// them) and the dead letters.
func insertAged(t *testing.T, db *testdb.DB, status outbox.Status, age time.Duration, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events
	(id, event_type, payload, status, sent_at, failed_at, next_attempt_at, lock_token, lease_until, created_at)
SELECT id, 'retention.test', '\x7b7d', $2, now() - $3::bigint * interval '1 microsecond',
	now() - $3::bigint * interval '1 microsecond', now() + interval '1 hour',
	CASE WHEN $2 = 'PROCESSING' THEN gen_random_uuid() END, now() + interval '1 hour',
	now() - $3::bigint * interval '1 microsecond' - interval '1 hour'
FROM unnest($1::uuid[]) AS id`, ids, string(status), age.Microseconds())
	require.NoError(t, err)
	return ids
}

// remaining returns how many of ids are still in the outbox, its dead
// letters or its history.
func remaining(t *testing.T, db *testdb.DB, ids []uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM outbox_events WHERE id = ANY($1::uuid[])) +
		(SELECT count(*) FROM outbox_events_dead WHERE id = ANY($1::uuid[])) +
		(SELECT count(*) FROM outbox_events_sent WHERE id = ANY($1::uuid[]))`, ids).Scan(&n))
	return n
}

// strays returns how many rows of the outbox table are SENT or FAILED.
func strays(t *testing.T, db *testdb.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_events WHERE status IN ('SENT', 'FAILED')`).Scan(&n))
	return n
}

// batchLog records the retention batches of one dispatcher.
type batchLog struct {
	mu      sync.Mutex
	batches []string // "SENT 10/10": status, deleted/limit; "skipped" when another held the lock
}

func (l *batchLog) hook(cfg *dispatcher.Config) { dispatcher.SetRetentionHook(cfg, l.add) }

func (l *batchLog) add(status outbox.Status, limit int, deleted int64, skipped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if skipped {
		l.batches = append(l.batches, "skipped")
		return
	}
	l.batches = append(l.batches, fmt.Sprintf("%s %d/%d", status, deleted, limit))
}

func (l *batchLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.batches...)
}

// retentionConfig is baseConfig with a retention pass every 10ms in
// batches of batch rows.
func retentionConfig(db *testdb.DB, batch int) dispatcher.Config {
	cfg := baseConfig(db)
	cfg.RetentionInterval = 10 * time.Millisecond
	cfg.RetentionBatchSize = batch
	return cfg
}

// waitPasses waits until d has finished n more retention passes than
// it had when called. A pass counts when it starts: n+1 started means n
// ended.
func waitPasses(t *testing.T, d *dispatcher.Dispatcher, n uint64) {
	t.Helper()
	from := d.Stats().RetentionPasses
	waitFor(t, "retention passes", func() bool { return d.Stats().RetentionPasses >= from+n+1 })
}

// Only SENT rows older than RetainSent go, in batches of at most
// RetentionBatchSize, a pass ending with its first short batch; young
// SENT rows, FAILED rows (kept by default) and PENDING and PROCESSING
// rows, however old their columns say they are, stay.
func TestRetentionDeletesOnlyDueSentRows(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 25)
	kept := append(insertAged(t, db, outbox.StatusSent, time.Hour, 5), insertAged(t, db, outbox.StatusFailed, 48*time.Hour, 5)...)
	kept = append(kept, insertAged(t, db, outbox.StatusPending, 48*time.Hour, 5)...)
	kept = append(kept, insertAged(t, db, outbox.StatusProcessing, 48*time.Hour, 5)...)

	cfg := retentionConfig(db, 10)
	var log batchLog
	log.hook(&cfg)
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitPasses(t, d, 2)

	require.Zero(t, remaining(t, db, due), "SENT rows older than RetainSent")
	require.Equal(t, len(kept), remaining(t, db, kept), "rows that are not due")
	s := d.Stats()
	require.EqualValues(t, 25, s.RetentionSent)
	require.Zero(t, s.RetentionFailed)
	require.Zero(t, s.Errors)
	// The first pass: two full batches and a short one; every later pass
	// finds nothing.
	got := log.get()
	require.Equal(t, []string{"SENT 10/10", "SENT 10/10", "SENT 5/10", "SENT 0/10"}, got[:4])
	for _, b := range got[3:] {
		require.Equal(t, "SENT 0/10", b)
	}
	// One line per pass: INFO for the pass that deleted, DEBUG for the rest.
	require.Equal(t, 1, logs.count(slog.LevelInfo, "deleted_sent", "25"))
	require.GreaterOrEqual(t, logs.count(slog.LevelDebug, "deleted_sent", "0"), 1)
}

// RetainFailed deletes FAILED rows older than it; KeepSent keeps every
// SENT row.
func TestRetentionFailedWithKeepSent(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusFailed, 8*24*time.Hour, 7)
	kept := append(insertAged(t, db, outbox.StatusFailed, 6*24*time.Hour, 3), insertAged(t, db, outbox.StatusSent, 30*24*time.Hour, 4)...)

	cfg := retentionConfig(db, 5)
	cfg.KeepSent = true
	cfg.RetainFailed = 7 * 24 * time.Hour
	mp := &telemetrytest.MeterProvider{}
	cfg.MeterProvider = mp
	var log batchLog
	log.hook(&cfg)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitPasses(t, d, 1)

	require.Zero(t, remaining(t, db, due), "FAILED rows older than RetainFailed")
	require.Equal(t, len(kept), remaining(t, db, kept))
	require.EqualValues(t, 7, d.Stats().RetentionFailed)
	require.Zero(t, d.Stats().RetentionSent)
	require.Equal(t, []string{"FAILED 5/5", "FAILED 2/5"}, log.get()[:2])
	table := attribute.String("pgoutbox.table", db.Table().String())
	require.InDelta(t, 7, mp.Sum("pgoutbox.events.deleted", table, attribute.String("pgoutbox.status", "FAILED")), 0,
		"the deleted rows are metered by status")
	require.InDelta(t, 7, mp.Sum("pgoutbox.events.deleted"), 0, "no SENT row deleted")
}

// While another transaction holds the table's retention lock (as another
// replica's batch does), a pass deletes nothing and says it skipped; once
// the lock is free, the next pass deletes.
func TestRetentionWaitsForItsTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 12)

	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		"pgoutbox.retention:"+db.Table().String())
	require.NoError(t, err)

	cfg := retentionConfig(db, 5)
	var log batchLog
	log.hook(&cfg)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitPasses(t, d, 3)
	require.Equal(t, len(due), remaining(t, db, due), "rows deleted while another held the lock")
	require.GreaterOrEqual(t, d.Stats().RetentionSkipped, uint64(3))
	for _, b := range log.get() {
		require.Equal(t, "skipped", b)
	}

	require.NoError(t, other.Rollback(ctx))
	waitFor(t, "the rows to go", func() bool { return remaining(t, db, due) == 0 })
	// Counted just after the batch commits.
	waitFor(t, "the rows counted", func() bool { return d.Stats().RetentionSent == 12 })
}

// Two replicas running retention at once on a table that is also being
// dispatched: every due row goes exactly once between them (their counts
// add up to the rows), dispatching is not disturbed, and nothing
// deadlocks.
func TestRetentionTwoReplicas(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 3000)
	pending := insertEvents(t, db, "retention.live", 500)
	deadlocksBefore := databaseDeadlocks(t, db)

	ds := make([]*dispatcher.Dispatcher, 2)
	logs := make([]*batchLog, 2)
	for i := range ds {
		cfg := retentionConfig(db, 50)
		logs[i] = &batchLog{}
		logs[i].hook(&cfg)
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("retention.live", func(context.Context, outbox.Event) error { return nil }))
		ds[i] = d
	}
	for _, d := range ds {
		runDispatcher(t, d)
	}
	waitFor(t, "the due rows to go", func() bool { return remaining(t, db, due) == 0 })
	waitFor(t, "the live events to be sent", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events_sent
			WHERE id = ANY($1::uuid[])`, pending).Scan(&n))
		return n == len(pending)
	})
	for _, d := range ds {
		waitPasses(t, d, 1) // any batch in flight has ended
	}

	var deleted, errs uint64
	for i, d := range ds {
		s := d.Stats()
		deleted += s.RetentionSent
		errs += s.Errors
		require.NotZero(t, s.RetentionPasses, "replica %d ran no pass", i)
		for _, b := range logs[i].get() {
			require.Contains(t, []string{"skipped", "SENT 0/50"}, cutCount(b), "replica %d: a batch over its limit: %s", i, b)
		}
	}
	require.EqualValues(t, len(due), deleted, "rows deleted, counted by both replicas")
	require.Zero(t, errs)
	require.Equal(t, len(pending), remaining(t, db, pending), "young SENT rows stay")
	require.Equal(t, deadlocksBefore, databaseDeadlocks(t, db), "pg_stat_database.deadlocks grew (it counts the whole database)")
}

// cutCount maps "SENT n/50" with 0 <= n <= 50 to "SENT 0/50" and keeps
// anything else as it is.
func cutCount(b string) string {
	var n, limit int
	if _, err := fmt.Sscanf(b, "SENT %d/%d", &n, &limit); err == nil && n >= 0 && n <= limit {
		return fmt.Sprintf("SENT 0/%d", limit)
	}
	return b
}

// A stop while a retention batch is in flight (held inside its DELETE by
// a trigger waiting for the test) cancels the batch: it rolls back whole,
// no row is left locked, Run returns cleanly and reports no error, and
// the next dispatcher deletes the rows.
func TestRetentionStopMidBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 30)
	const gate = 7317
	holder := gateDeletes(t, db, gate)

	cfg := retentionConfig(db, 10)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	// The batch's backend, waiting at the gate inside its DELETE.
	waiting := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND wait_event_type = 'Lock' AND wait_event = 'advisory'
			AND query LIKE '%gone AS%' AND query LIKE '%' || $1 || '%'`, db.Schema).Scan(&n))
		return n
	}
	waitFor(t, "a retention batch waiting inside its DELETE", func() bool { return waiting() == 1 })
	require.NoError(t, d.Stop(testctx.New(t)))
	require.NoError(t, <-errc)
	require.Zero(t, d.Stats().Errors, "a batch cut by the stop is not an error")
	require.Zero(t, d.Stats().RetentionSent)
	// The stop's cancel request reaches the server on its own: wait for it
	// to end the statement (still at the gate, which the test holds), then
	// open the gate.
	waitFor(t, "the cancelled batch to end", func() bool { return waiting() == 0 })
	require.NoError(t, holder.Rollback(ctx))
	require.Equal(t, len(due), remaining(t, db, due), "the cut batch rolled back whole")
	var locked int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM outbox_events_sent_default
		WHERE id = ANY($1::uuid[]) FOR UPDATE NOWAIT) AS l`, due).Scan(&locked))
	require.Equal(t, len(due), locked, "every row can be locked at once: none is held")

	next, err := dispatcher.New(db.Pool, retentionConfig(db, 10))
	require.NoError(t, err)
	runDispatcher(t, next)
	waitFor(t, "the next dispatcher to delete the rows", func() bool { return remaining(t, db, due) == 0 })
}

// A batch that runs out of time (a trigger raises query_canceled on the
// 101st row a statement deletes) halves the batch size for the rest of
// the drain, never doubling it back: a drain of 2,000 rows from batches
// of 800 fails three times (800, 400, 200), then deletes 100 at a time.
func TestRetentionTimeoutDoesNotOscillate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 2000)
	_, err := db.Pool.Exec(ctx, `
CREATE FUNCTION fake_timeout() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n int := coalesce(nullif(current_setting('rt.n', true), ''), '0')::int + 1;
BEGIN
	PERFORM set_config('rt.n', n::text, true);
	IF n > 100 THEN
		RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = 'query_canceled';
	END IF;
	RETURN OLD;
END $$;
CREATE TRIGGER fake_timeout BEFORE DELETE ON outbox_events_sent_default FOR EACH ROW EXECUTE FUNCTION fake_timeout();`)
	require.NoError(t, err)
	cfg := retentionConfig(db, 800)
	cfg.RetentionInterval = 50 * time.Millisecond
	var log batchLog
	log.hook(&cfg)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "the due rows to go", func() bool { return remaining(t, db, due) == 0 })
	require.LessOrEqual(t, d.Stats().Errors, uint64(3), "timed-out batches during one drain of 2,000 rows")
	require.Equal(t, "SENT 100/100", log.get()[0], "the first batch that fit")
}

// Without the stray index (migration 011 not run and SkipVerify set,
// or the index dropped or left invalid by a failed CREATE INDEX
// CONCURRENTLY after the start), each sweep would scan the outbox table:
// retention skips its passes and says once, at WARN, to run Migrate;
// once the index is there, the next pass sweeps and deletes.
func TestRetentionWaitsForTheStrayIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 12)
	_, err := db.Pool.Exec(ctx, `DROP INDEX outbox_events_stray_idx`)
	require.NoError(t, err)

	cfg := retentionConfig(db, 5)
	cfg.SkipVerify = true
	var log batchLog
	log.hook(&cfg)
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "a warning", func() bool {
		return logs.count(slog.LevelWarn, "index", `"`+db.Schema+`"."outbox_events_stray_idx"`) == 1
	})
	waitPasses(t, d, 3) // no batch, no second warning
	require.Equal(t, len(due), remaining(t, db, due))
	require.Equal(t, len(due), strays(t, db), "swept without the index")
	require.Empty(t, log.get(), "batches run without the index")
	require.Equal(t, 1, logs.count(slog.LevelWarn, "index", `"`+db.Schema+`"."outbox_events_stray_idx"`))
	require.Zero(t, d.Stats().Errors)

	_, err = db.Pool.Exec(ctx, `CREATE INDEX outbox_events_stray_idx ON outbox_events (seq) WHERE status IN ('SENT', 'FAILED')`)
	require.NoError(t, err)
	waitFor(t, "the rows to go", func() bool { return remaining(t, db, due) == 0 })
}

// A batch that fails reaches OnError with one pgoutbox: prefix, naming
// the retention, the status and the table; a permission error says what
// to do.
func TestRetentionErrorSaysWhatFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	insertAged(t, db, outbox.StatusSent, 48*time.Hour, 3)
	_, err := db.Pool.Exec(ctx, `
CREATE FUNCTION no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'permission denied for table outbox_events' USING ERRCODE = 'insufficient_privilege'; END $$;
CREATE TRIGGER no_delete BEFORE DELETE ON outbox_events_sent_default FOR EACH ROW EXECUTE FUNCTION no_delete();`)
	require.NoError(t, err)
	cfg := retentionConfig(db, 5)
	errs := &errorLog{}
	cfg.OnError = errs.add
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "an error", func() bool { return len(errs.filter(func(error) bool { return true })) > 0 })
	msg := errs.filter(func(error) bool { return true })[0].Error()
	require.Equal(t, 1, strings.Count(msg, "pgoutbox:"), msg)
	require.True(t, strings.HasPrefix(msg, "pgoutbox: dispatcher: retention of SENT rows of "+db.Table().String()+": "), msg)
	require.Contains(t, msg, "permission denied")
	require.Contains(t, msg, "grant the dispatcher's role DELETE on the dead letters and the SENT history, or set KeepSent", msg)
}

// Cancelling Run's ctx stops retention at once, although the drain goes
// on (a handler still runs): the batch in flight, held inside its DELETE
// by a trigger waiting for the test, is cancelled and its connection
// freed before the drain ends (and before the batch's own 30s timeout).
func TestRetentionStopsWithRunContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 30)
	const gate = 7318
	holder := gateDeletes(t, db, gate)
	insertEvents(t, db, "held", 1)

	cfg := retentionConfig(db, 10)
	cfg.DrainTimeout = 10 * time.Minute
	cfg.LeaseDuration = time.Hour // statements time out after 30s
	started, release := make(chan struct{}), make(chan struct{})
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("held", func(context.Context, outbox.Event) error {
		close(started)
		<-release
		return nil
	}))
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- d.Run(runCtx) }()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	waiting := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND wait_event_type = 'Lock' AND wait_event = 'advisory'
			AND query LIKE '%gone AS%' AND query LIKE '%' || $1 || '%'`, db.Schema).Scan(&n))
		return n
	}
	<-started
	waitFor(t, "a retention batch waiting inside its DELETE", func() bool { return waiting() == 1 })
	cancel()
	waitFor(t, "the batch cancelled while the drain goes on", func() bool { return waiting() == 0 })
	require.Zero(t, d.Stats().Errors, "the batch ended by its statement timeout, not by the cancel")
	select {
	case err := <-errc:
		t.Fatalf("Run returned before the handler did: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-errc)
	require.NoError(t, holder.Rollback(ctx))
	require.Equal(t, len(due), remaining(t, db, due), "rows the cancelled batch deleted")
	require.Zero(t, d.Stats().Errors)
}

// A pass deletes for at most half of RetentionInterval (at least 1s), then
// ends and logs; the next pass goes on with the drain where it stopped.
// Here the local clock jumps an hour after each batch: each pass deletes
// one batch, and the batches are those of one drain (10, 10, then 5).
func TestRetentionPassHasATimeBudget(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	due := insertAged(t, db, outbox.StatusSent, 48*time.Hour, 25)
	cfg := retentionConfig(db, 10)
	clock := &testClock{}
	dispatcher.SetClock(&cfg, clock.Now)
	var log batchLog
	dispatcher.SetRetentionHook(&cfg, func(status outbox.Status, limit int, deleted int64, skipped bool) {
		clock.advance(time.Hour)
		log.add(status, limit, deleted, skipped)
	})
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "the rows to go", func() bool { return remaining(t, db, due) == 0 })
	waitPasses(t, d, 1)
	require.Equal(t, []string{"SENT 10/10", "SENT 10/10", "SENT 5/10"}, log.get()[:3])
	require.Equal(t, 2, logs.count(slog.LevelInfo, "deleted_sent", "10"), "passes that deleted one full batch")
	require.Equal(t, 1, logs.count(slog.LevelInfo, "deleted_sent", "5"))
}

// gateDeletes holds every DELETE on the history's default partition (the
// retention's batches of SENT rows) inside its trigger until the
// returned transaction ends (the test rolls it back to let them go; the
// cleanup does too): the trigger waits for the advisory lock gate, which
// that transaction holds.
func gateDeletes(t *testing.T, db *testdb.DB, gate int64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION retention_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(%d); RETURN OLD; END $$;
CREATE TRIGGER retention_gate BEFORE DELETE ON outbox_events_sent_default FOR EACH ROW EXECUTE FUNCTION retention_gate();`, gate))
	require.NoError(t, err)
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	_, err = holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, gate)
	require.NoError(t, err)
	return holder
}

// historyPartitions lists the SENT history's time partitions with their
// rows, by name.
func historyPartitions(t *testing.T, db *testdb.DB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT c.relname::text,
		(xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I.%I', $2::text, c.relname), false, true, '')))[1]::text::int
		FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname <> 'outbox_events_sent_default'`, "outbox_events_sent", db.Schema)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		require.NoError(t, rows.Scan(&name, &n))
		out[name] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// A retention pass creates the history's time partitions ahead of now
// (6h each for the default RetainSent of 24h) and drops those whose
// whole range is older than RetainSent, counting their rows as SENT rows
// deleted; the SENT strays it sweeps land in the partition of their
// sent_at, not in the default partition.
func TestRetentionKeepsTheHistoryPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	span := 6 * time.Hour
	old := now.Add(-72 * time.Hour).UTC().Truncate(span)
	for i, n := range []int{5, 3} { // partitions a past retention pass made
		from := old.Add(time.Duration(i) * span)
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s PARTITION OF outbox_events_sent FOR VALUES FROM ('%[2]s') TO ('%[3]s');
INSERT INTO outbox_events_sent (id, seq, event_type, sent_at, payload)
SELECT gen_random_uuid(), i, 'retention.old', '%[2]s'::timestamptz + i * interval '1 minute', '\x7b7d' FROM generate_series(1, %[4]d) AS i`,
			names.QualifiedPartition(from), from.Format(time.RFC3339), from.Add(span).Format(time.RFC3339), n))
		require.NoError(t, err)
	}
	young := insertAged(t, db, outbox.StatusSent, time.Minute, 4)

	cfg := retentionConfig(db, 10)
	logs := &logRecorder{}
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitPasses(t, d, 1)

	parts := historyPartitions(t, db)
	require.NotContains(t, parts, names.Partition(old))
	require.NotContains(t, parts, names.Partition(old.Add(span)))
	require.EqualValues(t, 8, d.Stats().RetentionSent, "the dropped partitions' rows")
	current := now.UTC().Truncate(span)
	require.Equal(t, 4, parts[names.Partition(current)], "the swept strays, in their partition")
	require.Contains(t, parts, names.Partition(current.Add(span)), "a partition ahead")
	require.Equal(t, len(young), remaining(t, db, young))
	require.Equal(t, 1, logs.count(slog.LevelInfo, "partitions_dropped", "2"))
	require.Zero(t, d.Stats().Errors)
}

// SENT and FAILED rows written into the outbox table while the
// dispatcher runs (by a dispatcher of version 9 still running during an
// upgrade) are swept by the next retention pass: SENT into the history,
// FAILED into the dead letters, each row whole.
func TestRetentionSweepsStraysWrittenWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	cfg := retentionConfig(db, 10)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("retention.live", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
	waitPasses(t, d, 1)

	sent := insertAged(t, db, outbox.StatusSent, time.Second, 15)
	failed := insertAged(t, db, outbox.StatusFailed, time.Second, 7)
	waitFor(t, "the strays to be swept", func() bool { return strays(t, db) == 0 })
	var inSent, inDefault, inDead int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tableoid = 'outbox_events_sent_default'::regclass)
		FROM outbox_events_sent WHERE id = ANY($1::uuid[]) AND event_type = 'retention.test'`, sent).Scan(&inSent, &inDefault))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events_dead WHERE id = ANY($1::uuid[])
		AND status = 'FAILED' AND failed_at IS NOT NULL`, failed).Scan(&inDead))
	require.Equal(t, len(sent), inSent)
	require.Zero(t, inDefault, "SENT strays in the default partition")
	require.Equal(t, len(failed), inDead)
	require.Zero(t, d.Stats().Errors)
}

// Start creates the history's partitions of now and ahead before the
// first claim (here with none left, and the first retention pass an hour
// away), so that the first completions do not land in the default
// partition.
func TestStartCreatesTheHistoryPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t) // without the history's time partitions
	require.Empty(t, historyPartitions(t, db))
	cfg := baseConfig(db)
	cfg.RetentionInterval = time.Hour
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
	require.Zero(t, d.Stats().RetentionPasses, "no retention pass yet")
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	span := purge.Span(24 * time.Hour) // the default RetainSent
	parts := historyPartitions(t, db)
	require.Contains(t, parts, names.Partition(now.UTC().Truncate(span)), "the partition of now")
	require.Contains(t, parts, names.Partition(now.UTC().Truncate(span).Add(span)), "the next one")
}
