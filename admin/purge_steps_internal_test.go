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
	require.Len(t, page.Entries, 4, "one row per partition and the default partition's batch")
	last := page.Entries[0]
	require.Equal(t, actor.RequestID, last.RequestID, "the last step, the default partition's batch, records the request")
	require.Zero(t, last.Rows)
	for _, e := range page.Entries[1:] {
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

// An audited SENT purge that fails partway (a partition it cannot lock)
// has recorded no request id: the same request posted again carries on
// with the partitions left and is then done. Review found the request
// recorded by the first step, so that the retry answered "already done"
// with partitions still due.
func TestAuditedPurgeResumesAfterAFailedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	var start time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now() - interval '2 days')`).Scan(&start))
	var parts []string
	for i := range 3 {
		from := start.Add(time.Duration(i) * time.Hour)
		name := "outbox_events_s" + from.UTC().Format("200601021504")
		parts = append(parts, name)
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF outbox_events_sent FOR VALUES FROM ('%s') TO ('%s')`,
			name, from.Format(time.RFC3339), from.Add(time.Hour).Format(time.RFC3339)))
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			VALUES (nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', $1)`, from.Add(time.Minute))
		require.NoError(t, err)
	}
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	reader := db.Conn(t)
	readerTx, err := reader.Begin(ctx)
	require.NoError(t, err)
	steps := 0
	a.betweenSteps = func() {
		steps++
		if steps == 2 { // a reader of the second partition: its DETACH times out
			_, err := readerTx.Exec(ctx, `SELECT count(*) FROM `+parts[1])
			require.NoError(t, err)
		}
	}
	actor := &Actor{Name: "alice", Source: SourceConsole, RequestID: uuid.New()}
	n, err := a.Purge(ctx, PurgeParams{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Actor: actor})
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrAlreadyDone)
	require.Equal(t, int64(1), n, "the first partition was retired before the failure")
	require.NoError(t, readerTx.Rollback(ctx))

	a.betweenSteps = nil
	n, err = a.Purge(ctx, PurgeParams{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Actor: actor})
	require.NoError(t, err, "the same request carries on")
	require.Equal(t, int64(2), n)
	_, err = a.Purge(ctx, PurgeParams{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Actor: actor})
	require.ErrorIs(t, err, ErrAlreadyDone, "and is then done")
	page, err := a.AuditLog(ctx, AuditParams{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 4, "three partitions and the default partition's batch")
	require.Equal(t, actor.RequestID, page.Entries[0].RequestID)
}
