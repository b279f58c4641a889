package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testBundle is one test's migrated outbox in its own schema and an Admin
// on it.
type testBundle struct {
	db    *testdb.DB
	admin *admin.Admin
}

// setup migrates a schema with the order index (testdb.KeyOrder: the
// blocked-key views and Counts.DueBlocked read it) and opens an Admin on
// it.
func setup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	return &testBundle{db: db, admin: a}
}

// row describes one event row to insert with plain SQL. Durations are
// taken from the database's now(); zero "Ago" fields leave the column as
// the status implies (sent_at for SENT, failed_at for FAILED: now();
// created_at: now()).
type row struct {
	Status     string // defaults to PENDING
	Type       string // defaults to test.event
	Aggregate  string // aggregate_id; NULL when empty
	Partition  string // partition_key; NULL when empty
	Skipped    bool   // skipped_at now()
	Code       string
	DueIn      time.Duration
	SentAgo    time.Duration
	FailedAgo  time.Duration
	CreatedAgo time.Duration
	Attempts   int
	Recoveries int
	Snoozes    int
	Payload    []byte
	Headers    map[string]string
	AttemptLog string // a JSON array; defaults to []
	// Stray keeps a SENT or FAILED row in the outbox table (a row not
	// moved yet); without it SENT rows go to the history and FAILED rows
	// to the dead letters, with a seq from the outbox's identity.
	Stray bool
}

// allRows is every row of the outbox, wherever it lives: the outbox
// table, the dead letters and the history (same columns, same order).
const allRows = `(SELECT * FROM outbox_events UNION ALL SELECT * FROM outbox_events_dead
	UNION ALL SELECT * FROM outbox_events_sent)`

// home is the table where a row of status lives.
func home(status string, stray bool) string {
	switch {
	case stray:
	case status == "SENT":
		return "outbox_events_sent"
	case status == "FAILED":
		return "outbox_events_dead"
	}
	return "outbox_events"
}

// insert stores the rows in the given order (so seq follows it) and
// returns their ids.
func (b *testBundle) insert(t *testing.T, rows ...row) []uuid.UUID {
	t.Helper()
	batch := &pgx.Batch{}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = uuid.Must(uuid.NewV7())
		r.Status = orDefault(r.Status, "PENDING")
		r.Type = orDefault(r.Type, "test.event")
		r.AttemptLog = orDefault(r.AttemptLog, "[]")
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		var code *string
		if r.Code != "" {
			code = &r.Code
		}
		table, seq := home(r.Status, r.Stray), ""
		if table != "outbox_events" {
			table, seq = table+" (seq, ", "nextval(pg_get_serial_sequence('outbox_events', 'seq')), "
		} else {
			table += " ("
		}
		batch.Queue(`INSERT INTO `+table+`id, event_type, status, next_attempt_at, attempts, recoveries,
	payload, headers, attempt_log, last_error_code, last_error, lock_token, lock_owner, locked_at, lease_until, sent_at, failed_at, snoozes,
	aggregate_id, created_at, partition_key, skipped_at)
VALUES (`+seq+`$1, $2, $3, now() + $4::bigint * interval '1 microsecond', $5, $6, $7, $8, $9::jsonb, $10,
	CASE WHEN $10::text IS NOT NULL THEN 'boom: ' || $10 END,
	CASE WHEN $3 = 'PROCESSING' THEN gen_random_uuid() END,
	CASE WHEN $3 = 'PROCESSING' THEN 'worker-1' END,
	CASE WHEN $3 = 'PROCESSING' THEN now() END,
	CASE WHEN $3 = 'PROCESSING' THEN now() + interval '1 hour' END,
	CASE WHEN $3 = 'SENT' OR $11::bigint > 0 THEN now() - $11::bigint * interval '1 microsecond' END,
	CASE WHEN $3 = 'FAILED' OR $12::bigint > 0 THEN now() - $12::bigint * interval '1 microsecond' END, $13,
	nullif($14, ''), now() - $15::bigint * interval '1 microsecond', nullif($16, ''), CASE WHEN $17 THEN now() END)`,
			ids[i], r.Type, r.Status, r.DueIn.Microseconds(), r.Attempts, r.Recoveries,
			r.Payload, r.Headers, r.AttemptLog, code, r.SentAgo.Microseconds(), r.FailedAgo.Microseconds(), r.Snoozes, r.Aggregate,
			r.CreatedAgo.Microseconds(), r.Partition, r.Skipped)
	}
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
	return ids
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// many returns n copies of r.
func many(n int, r row) []row {
	rows := make([]row, n)
	for i := range rows {
		rows[i] = r
	}
	return rows
}

// status returns the stored status of id, or "" when the row is gone,
// wherever it lives.
func (b *testBundle) status(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var s string
	err := b.db.Pool.QueryRow(context.Background(), "SELECT status FROM "+allRows+" AS o WHERE id = $1", id).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return s
}

// snapshot returns a digest of every row, to prove a call changed nothing.
func (b *testBundle) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT count(*) || ':' || coalesce(md5(string_agg(o::text, ',' ORDER BY seq)), '') FROM "+allRows+" AS o").Scan(&s))
	return s
}

// countWhere counts rows matching a condition, wherever they live.
func (b *testBundle) countWhere(t *testing.T, cond string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+allRows+" AS o WHERE "+cond, args...).Scan(&n))
	return n
}

// listen returns a connection of its own that listens on the table's
// wake-up channel.
func (b *testBundle) listen(t *testing.T) *pgx.Conn {
	t.Helper()
	names, err := sqlname.For(b.db.Table())
	require.NoError(t, err)
	conn := b.db.Conn(t)
	_, err = conn.Exec(context.Background(), "LISTEN "+pgxIdent(names.Channel()))
	require.NoError(t, err)
	return conn
}

// notNotified checks that no notification came on listener before now:
// it sends a marker on the table's channel and requires the marker to be
// the first notification read. PostgreSQL delivers notifications in
// commit order, so one sent by a statement committed earlier would come
// first; no fixed wait is involved.
func (b *testBundle) notNotified(t *testing.T, listener *pgx.Conn) {
	t.Helper()
	names, err := sqlname.For(b.db.Table())
	require.NoError(t, err)
	const marker = "end-marker"
	_, err = b.db.Pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", names.Channel(), marker)
	require.NoError(t, err)
	n, err := listener.WaitForNotification(testctx.New(t))
	require.NoError(t, err)
	require.Equal(t, marker, n.Payload, "a notification came before the marker")
}

// notified waits (within the run's budget: testctx) for a notification
// on listener and checks that it came on the table's wake-up channel.
func (b *testBundle) notified(t *testing.T, listener *pgx.Conn) {
	t.Helper()
	names, err := sqlname.For(b.db.Table())
	require.NoError(t, err)
	n, err := listener.WaitForNotification(testctx.New(t))
	require.NoError(t, err)
	require.Equal(t, names.Channel(), n.Channel)
}

// requireInputErr checks that err is an *outbox.InputError naming field.
func requireInputErr(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
	var ierr *outbox.InputError
	require.ErrorAs(t, err, &ierr)
	require.Equal(t, field, ierr.Field)
	require.Contains(t, err.Error(), field)
}
