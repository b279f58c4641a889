package emitter

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestCopyDueMatchesInsert sends the same delays once by the INSERT and
// once by COPY in one transaction and requires the same next_attempt_at,
// to the microsecond: COPY adds each delay to the transaction's now(),
// read once, as the INSERT adds it in SQL. A zero delay is now() itself.
func TestCopyDueMatchesInsert(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	e, err := New(Config{Table: db.Table(), DisableNotify: true})
	require.NoError(t, err)
	delays := []time.Duration{0, time.Microsecond, 1500 * time.Nanosecond, 999 * time.Nanosecond,
		time.Second + 123456789, time.Hour, 36 * time.Hour, 400 * 24 * time.Hour, 100 * 365 * 24 * time.Hour}
	events := make([]outbox.Event, len(delays))
	for i, d := range delays {
		events[i] = outbox.Event{Type: "due.check", Payload: []byte("x"), Delay: d}
	}
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	byInsert, err := e.prepare(events)
	require.NoError(t, err)
	byInsert.fill()
	require.NoError(t, e.send(ctx, tx, byInsert, false))
	byCopy, err := e.prepare(events)
	require.NoError(t, err)
	require.True(t, byCopy.hasDelay)
	require.NoError(t, e.sendCopy(ctx, tx, byCopy, false))

	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&now))
	for i, d := range delays {
		inserted, copied := dueOf(t, tx, byInsert, i), dueOf(t, tx, byCopy, i)
		require.True(t, inserted.Equal(copied), "delay %v: INSERT %v, COPY %v", d, inserted, copied)
		require.Equal(t, d.Truncate(time.Microsecond), inserted.Sub(now), "delay %v", d)
	}
}

// dueOf reads the next_attempt_at of event i of c in tx.
func dueOf(t *testing.T, tx pgx.Tx, c *columns, i int) time.Time {
	t.Helper()
	var due time.Time
	require.NoError(t, tx.QueryRow(context.Background(),
		`SELECT next_attempt_at FROM outbox_events WHERE id = $1`, c.ids[i]).Scan(&due))
	return due
}
