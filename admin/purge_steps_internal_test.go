package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// An audited SENT purge of three partitions commits step by step, each
// step with its audit row (only the first carries the request id, the
// others name it in their filter): between two steps the purge holds no
// lock on the history, and a completion writes it without waiting
// (LOCK ... NOWAIT: refused at once, were a lock held).
func TestAuditedPurgeStepsLetCompletionsThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	var start time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now() - interval '2 days')`).Scan(&start))
	for i := range 3 {
		from := start.Add(time.Duration(i) * time.Hour)
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE outbox_events_s%s PARTITION OF outbox_events_sent FOR VALUES FROM ('%s') TO ('%s')`,
			from.UTC().Format("200601021504"), from.Format(time.RFC3339), from.Add(time.Hour).Format(time.RFC3339)))
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			VALUES (nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', $1)`, from.Add(time.Minute))
		require.NoError(t, err)
	}
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	completer := db.Conn(t)
	steps := 0
	a.betweenSteps = func() {
		steps++
		tx, err := completer.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `LOCK TABLE outbox_events_sent IN ROW EXCLUSIVE MODE NOWAIT`)
		require.NoError(t, err, "a completion waits for the purge between its steps")
		_, err = tx.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			VALUES (nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', now())`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	actor := &Actor{Name: "alice", Source: SourceConsole, RequestID: uuid.New()}
	n, err := a.Purge(ctx, PurgeParams{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Actor: actor})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Equal(t, 3, steps)

	page, err := a.AuditLog(ctx, AuditParams{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 4, "the default partition's batch and one row per partition")
	first := page.Entries[3]
	require.Equal(t, actor.RequestID, first.RequestID)
	require.Zero(t, first.Rows)
	for _, e := range page.Entries[:3] {
		require.Equal(t, uuid.Nil, e.RequestID)
		require.Equal(t, actor.RequestID.String(), e.Filter["request"])
		require.Equal(t, int64(1), e.Rows)
	}
	var completions int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events_sent`).Scan(&completions))
	require.Equal(t, 3, completions)

	_, err = a.Purge(ctx, PurgeParams{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Actor: actor})
	require.ErrorIs(t, err, ErrAlreadyDone)
}
