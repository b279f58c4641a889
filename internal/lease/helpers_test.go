package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// env is one test's migrated schema and a Store on its outbox table.
type env struct {
	db    *testdb.DB
	store *lease.Store
}

// newEnv migrates a schema for one test with opts (testdb.KeyOrder for
// the ordered claim, which reads the order index).
func newEnv(tb testing.TB, opts ...testdb.MigrateOption) env {
	tb.Helper()
	db := testdb.NewMigrated(tb, opts...)
	store, err := lease.New(db.Table())
	require.NoError(tb, err)
	return env{db: db, store: store}
}

// spec describes one event row to insert with plain SQL (the emitter is
// not used here on purpose: these tests must not depend on it).
type spec struct {
	Type    string
	Payload []byte
	Headers map[string]string
	// DueIn is added to the database's now() for next_attempt_at.
	DueIn time.Duration
	// Status, when set, is stored as is; PROCESSING rows get a random token
	// and a lease that expired a second ago. A SENT row goes to the SENT
	// history (sent now), a FAILED one to the dead letters (failed now),
	// both with a seq of the outbox table's sequence, unless Stray.
	Status string
	// Stray keeps a SENT or FAILED row in the outbox table, as a
	// dispatcher of schema version 9 leaves it.
	Stray bool
	// Optional columns; empty means NULL.
	AggregateType, AggregateID, PartitionKey, IdempotencyKey, ContentType string
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// insert stores the rows in the given order (so seq follows it) in one
// statement and returns their ids.
func insert(tb testing.TB, db lease.DB, specs ...spec) []uuid.UUID {
	tb.Helper()
	batch := &pgx.Batch{}
	ids := make([]uuid.UUID, len(specs))
	for i, s := range specs {
		id, err := uuid.NewV7()
		require.NoError(tb, err)
		ids[i] = id
		if s.Type == "" {
			s.Type = "test.event"
		}
		if s.Headers == nil {
			s.Headers = map[string]string{}
		}
		if s.Status == "" {
			s.Status = "PENDING"
		}
		table, seq, seqValue := "outbox_events", "", ""
		if (s.Status == "SENT" || s.Status == "FAILED") && !s.Stray {
			table = map[string]string{"SENT": "outbox_events_sent", "FAILED": "outbox_events_dead"}[s.Status]
			seq, seqValue = ", seq", ", nextval(pg_get_serial_sequence('outbox_events', 'seq'))"
		}
		batch.Queue(`INSERT INTO `+table+` (id, event_type, payload, headers, status,
	next_attempt_at, aggregate_type, aggregate_id, partition_key, idempotency_key, content_type,
	lock_token, lease_until, sent_at, failed_at`+seq+`)
VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 microsecond', $7, $8, $9, $10, $11,
	CASE WHEN $5 = 'PROCESSING' THEN gen_random_uuid() END,
	CASE WHEN $5 = 'PROCESSING' THEN now() - interval '1 second' END,
	CASE WHEN $5 = 'SENT' THEN now() END, CASE WHEN $5 = 'FAILED' THEN now() END`+seqValue+`)`,
			id, s.Type, s.Payload, s.Headers, s.Status, s.DueIn.Microseconds(),
			nullable(s.AggregateType), nullable(s.AggregateID), nullable(s.PartitionKey),
			nullable(s.IdempotencyKey), nullable(s.ContentType))
	}
	require.NoError(tb, db.SendBatch(context.Background(), batch).Close())
	return ids
}

// insertDue stores n due PENDING rows.
func insertDue(tb testing.TB, db lease.DB, n int) []uuid.UUID {
	tb.Helper()
	return insert(tb, db, make([]spec, n)...)
}

// logEntry is one element of attempt_log.
type logEntry struct {
	Attempt int       `json:"attempt"`
	Outcome string    `json:"outcome"`
	Code    *string   `json:"code"`
	Message *string   `json:"message"`
	Owner   string    `json:"owner"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// row is an outbox row as stored.
type row struct {
	ID            uuid.UUID         `db:"id"`
	Seq           int64             `db:"seq"`
	Status        string            `db:"status"`
	Attempts      int               `db:"attempts"`
	Recoveries    int               `db:"recoveries"`
	Snoozes       int               `db:"snoozes"`
	NextAttemptAt time.Time         `db:"next_attempt_at"`
	LockToken     *uuid.UUID        `db:"lock_token"`
	LockOwner     *string           `db:"lock_owner"`
	LockedAt      *time.Time        `db:"locked_at"`
	LeaseUntil    *time.Time        `db:"lease_until"`
	HeartbeatAt   *time.Time        `db:"heartbeat_at"`
	LastErrorCode *string           `db:"last_error_code"`
	LastError     *string           `db:"last_error"`
	AttemptLog    []logEntry        `db:"attempt_log"`
	Headers       map[string]string `db:"headers"`
	Payload       []byte            `db:"payload"`
	CreatedAt     time.Time         `db:"created_at"`
	SentAt        *time.Time        `db:"sent_at"`
	FailedAt      *time.Time        `db:"failed_at"`
}

const rowColumns = `id, seq, status, attempts, recoveries, snoozes, next_attempt_at, lock_token, lock_owner,
	locked_at, lease_until, heartbeat_at, last_error_code, last_error, attempt_log, headers, payload,
	created_at, sent_at, failed_at`

// everyRow is every row of the outbox table, its dead letters and its
// SENT history.
const everyRow = `(SELECT ` + rowColumns + ` FROM outbox_events UNION ALL SELECT ` + rowColumns + ` FROM outbox_events_dead
	UNION ALL SELECT ` + rowColumns + ` FROM outbox_events_sent) AS r`

// get reads one row, wherever it is (see tableOf); it fails the test when
// the row does not exist.
func get(tb testing.TB, db lease.DB, id uuid.UUID) row {
	tb.Helper()
	rows, err := db.Query(context.Background(), `SELECT * FROM `+everyRow+` WHERE id = $1`, id)
	require.NoError(tb, err)
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[row])
	require.NoError(tb, err, "row %s", id)
	return r
}

// tableOf returns the table that holds the row: "outbox_events",
// "outbox_events_dead" or "outbox_events_sent", "" when none; it fails
// the test when more than one does.
func tableOf(tb testing.TB, db lease.DB, id uuid.UUID) string {
	tb.Helper()
	rows, err := db.Query(context.Background(), `SELECT 'outbox_events' FROM outbox_events WHERE id = $1
		UNION ALL SELECT 'outbox_events_dead' FROM outbox_events_dead WHERE id = $1
		UNION ALL SELECT 'outbox_events_sent' FROM outbox_events_sent WHERE id = $1`, id)
	require.NoError(tb, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(tb, err)
	require.LessOrEqual(tb, len(tables), 1, "row %s is in %v", id, tables)
	if len(tables) == 0 {
		return ""
	}
	return tables[0]
}

// requireIn checks that the row is in table, with status.
func requireIn(tb testing.TB, db lease.DB, id uuid.UUID, table, status string) row {
	tb.Helper()
	require.Equal(tb, table, tableOf(tb, db, id), "the table of row %s", id)
	r := get(tb, db, id)
	require.Equal(tb, status, r.Status, "the status of row %s", id)
	return r
}

// queryRow runs a one-row query on any lease.DB.
func queryRow(db lease.DB, sql string, args ...any) pgx.Row {
	rows, err := db.Query(context.Background(), sql, args...)
	if err != nil {
		return errRow{err}
	}
	return oneRow{rows}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type oneRow struct{ rows pgx.Rows }

func (r oneRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// dbClock returns the database's clock_timestamp(): the current time as the
// database sees it, not the start of a transaction.
func dbClock(tb testing.TB, db lease.DB) time.Time {
	tb.Helper()
	var now time.Time
	require.NoError(tb, queryRow(db, `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// expire moves the lease of the rows one second into the past, as if the
// lease duration had elapsed without a renewal.
func expire(tb testing.TB, db lease.DB, ids ...uuid.UUID) {
	tb.Helper()
	tag, err := db.Exec(context.Background(),
		`UPDATE outbox_events SET lease_until = now() - interval '1 second' WHERE id = ANY($1)`, ids)
	require.NoError(tb, err)
	require.EqualValues(tb, len(ids), tag.RowsAffected())
}

// countStatus returns how many rows have the status, in the outbox table,
// its dead letters and its SENT history.
func countStatus(tb testing.TB, db lease.DB, status string) int {
	tb.Helper()
	var n int
	require.NoError(tb, queryRow(db, `SELECT count(*) FROM `+everyRow+` WHERE status = $1`, status).Scan(&n))
	return n
}

// batchIDs lists the ids of a batch's events, in order.
func batchIDs(b lease.Batch) []uuid.UUID {
	out := make([]uuid.UUID, len(b.Events))
	for i, e := range b.Events {
		out[i] = e.ID
	}
	return out
}

// claimN inserts n due rows and claims them all in one batch.
func claimN(tb testing.TB, e env, n int) lease.Batch { // marking all started, as a caller that starts them at once
	tb.Helper()
	insertDue(tb, e.db.Pool, n)
	b, err := e.store.Claim(context.Background(), e.db.Pool, lease.ClaimParams{Owner: "worker-a", Limit: n, Lease: time.Hour, Start: n})
	require.NoError(tb, err)
	require.Len(tb, b.Events, n)
	return b
}

// claimOne claims exactly the one due row of the table.
func claimOne(tb testing.TB, e env, owner string) lease.Batch { // marked started
	tb.Helper()
	b, err := e.store.Claim(context.Background(), e.db.Pool, lease.ClaimParams{Owner: owner, Limit: 1, Lease: time.Hour, Start: 1})
	require.NoError(tb, err)
	require.Len(tb, b.Events, 1)
	if b.Suspect[0] { // no claim marks a suspect: mark it as the dispatcher does, right before its attempt
		require.False(tb, b.Started[0], "a claim marked a suspect started")
		res, err := e.store.Start(context.Background(), e.db.Pool, b.Refs(), false)
		require.NoError(tb, err)
		require.Equal(tb, b.Refs(), res.Done)
	}
	return b
}

// between asserts lo <= got <= hi.
func between(tb testing.TB, got, lo, hi time.Time, what string) {
	tb.Helper()
	require.False(tb, got.Before(lo), "%s %v is before %v", what, got, lo)
	require.False(tb, got.After(hi), "%s %v is after %v", what, got, hi)
}

// tracer counts what a pool sends: single queries and batches.
type tracer struct {
	mu           sync.Mutex
	queries      []string
	batches      int
	batchQueries int
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.queries = append(tr.queries, d.SQL)
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.batches++
	return ctx
}

func (tr *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.batchQueries++
}

func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// counts returns single queries, batches and queries inside batches.
func (tr *tracer) counts() (queries, batches, batchQueries int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.queries), tr.batches, tr.batchQueries
}

// tracedPool opens a one-connection pool on the test's schema whose every
// round trip is counted by the returned tracer.
func tracedPool(tb testing.TB, db *testdb.DB) (*pgxpool.Pool, *tracer) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(tb, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	tr := &tracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool, tr
}
