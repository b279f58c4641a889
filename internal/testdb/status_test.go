package testdb_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestStatusOfReadsTheThreeTables places one event in each of the outbox
// table, its dead letters and its SENT history, and one nowhere.
func TestStatusOfReadsTheThreeTables(t *testing.T) {
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	pending, dead, sent, gone := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	_, err := db.Pool.Exec(ctx, `WITH
		t AS (INSERT INTO outbox_events (id, event_type) VALUES ($1, 't')),
		d AS (INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at) VALUES ($2, 100, 't', 'FAILED', now()))
		INSERT INTO outbox_events_sent (id, seq, event_type, status, sent_at) VALUES ($3, 101, 't', 'SENT', now()),
			($4, 102, 't', 'SENT', now())`, pending, dead, sent, uuid.New())
	require.NoError(t, err)
	for id, want := range map[uuid.UUID]string{pending: "PENDING", dead: "FAILED", sent: "SENT", gone: ""} {
		got, err := testdb.StatusOf(ctx, db.Pool, db.Table(), id)
		require.NoError(t, err)
		require.Equal(t, want, got, "event %s", id)
	}
	for status, want := range map[outbox.Status]int{outbox.StatusPending: 1, outbox.StatusFailed: 1, outbox.StatusSent: 2, outbox.StatusProcessing: 0} {
		n, err := testdb.CountStatus(ctx, db.Pool, db.Table(), status)
		require.NoError(t, err)
		require.Equal(t, want, n, "status %s", status)
	}
}

// TestStatusOfPrefersTheOutboxTable: an event replayed back into the
// outbox table while a copy stays in the history reads as its live row.
func TestStatusOfPrefersTheOutboxTable(t *testing.T) {
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	id := uuid.New()
	_, err := db.Pool.Exec(ctx, `WITH
		s AS (INSERT INTO outbox_events_sent (id, seq, event_type, status, sent_at) VALUES ($1, 100, 't', 'SENT', now())),
		d AS (INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at) VALUES ($1, 100, 't', 'FAILED', now()))
		INSERT INTO outbox_events (id, event_type) VALUES ($1, 't')`, id)
	require.NoError(t, err)
	got, err := testdb.StatusOf(ctx, db.Pool, db.Table(), id)
	require.NoError(t, err)
	require.Equal(t, "PENDING", got)
	_, err = db.Pool.Exec(ctx, `DELETE FROM outbox_events`)
	require.NoError(t, err)
	got, err = testdb.StatusOf(ctx, db.Pool, db.Table(), id)
	require.NoError(t, err)
	require.Equal(t, "FAILED", got)
}

// MoveToDead moves the row and makes it FAILED with the code.
func TestMoveToDead(t *testing.T) {
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	id := uuid.New()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id) VALUES ($1, 't', 'k')`, id)
	require.NoError(t, err)
	db.MoveToDead(t, id, "handler_error")
	var code, agg string
	var failed bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_error_code, aggregate_id, failed_at IS NOT NULL
		FROM outbox_events_dead WHERE id = $1 AND status = 'FAILED'`, id).Scan(&code, &agg, &failed))
	require.Equal(t, []any{"handler_error", "k", true}, []any{code, agg, failed})
	n, err := testdb.CountStatus(ctx, db.Pool, db.Table(), outbox.StatusPending)
	require.NoError(t, err)
	require.Zero(t, n, "the row left the outbox table")
}
