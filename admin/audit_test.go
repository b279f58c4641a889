package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// auditSetup is setup with an Admin that logs to the returned buffer.
func auditSetup(t *testing.T) (*testBundle, *testdb.LogBuffer) {
	t.Helper()
	b := setup(t)
	logs := &testdb.LogBuffer{}
	a, err := admin.New(b.db.Pool, admin.Config{Table: b.db.Table(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	b.admin = a
	return b, logs
}

// auditRows returns every audit entry, newest first.
func auditRows(t *testing.T, b *testBundle) []admin.AuditEntry {
	t.Helper()
	page, err := b.admin.AuditLog(context.Background(), admin.AuditParams{Limit: admin.MaxAuditLimit})
	require.NoError(t, err)
	require.Zero(t, page.Next)
	return page.Entries
}

// refuseAudit makes every insert into the audit table fail, as a crash
// between the action and its audit row would leave it.
func refuseAudit(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'audit refused'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON outbox_events_audit FOR EACH ROW EXECUTE FUNCTION refuse_audit()`)
	require.NoError(t, err)
}

var ops = &admin.Actor{Name: "alice@host", Source: admin.SourceConsole}

// An audited replay, skip and purge each write one audit row naming the
// actor, the action, its filter and the rows changed, and one log line;
// a dry run writes neither, and a call without an actor no row.
func TestAuditedActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, logs := auditSetup(t)
	secret := []byte("payload-secret-bytes")
	failed := b.insert(t, row{Status: "FAILED", Type: "order.created", Code: "timeout", Payload: secret},
		row{Status: "FAILED", Type: "order.created", Code: "timeout", Payload: secret},
		row{Status: "FAILED", Type: "other", Code: "timeout"},
		row{Status: "FAILED", Aggregate: "k1", FailedAgo: 3 * time.Hour})
	b.insert(t, row{Status: "SENT", SentAgo: 3 * time.Hour}, row{Status: "SENT", SentAgo: 3 * time.Hour})

	res, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "order.created", Code: "timeout", DryRun: true, Actor: ops})
	require.NoError(t, err)
	require.Len(t, res.Replayed, 2)
	require.Empty(t, auditRows(t, b), "a dry run is not audited")

	res, err = b.admin.Replay(ctx, admin.ReplayParams{Type: "order.created", Code: "timeout", Limit: 50, Actor: ops})
	require.NoError(t, err)
	require.Len(t, res.Replayed, 2)
	_, err = b.admin.Replay(ctx, admin.ReplayParams{Type: "other"})
	require.NoError(t, err, "without an actor")
	_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{failed[3]}, Actor: ops})
	require.NoError(t, err)
	n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Hour, Actor: ops})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	entries := auditRows(t, b)
	require.Len(t, entries, 3, "the replay without an actor is not audited")
	purge, skip, replay := entries[0], entries[1], entries[2]
	require.Greater(t, purge.ID, skip.ID)
	require.Greater(t, skip.ID, replay.ID)
	for _, e := range entries {
		require.Equal(t, "alice@host", e.Actor)
		require.Equal(t, admin.SourceConsole, e.Source)
		require.WithinDuration(t, time.Now(), e.At, time.Hour, "the database clock, today")
	}
	require.Equal(t, admin.ActionReplay, replay.Action)
	require.Equal(t, map[string]any{"type": "order.created", "code": "timeout", "limit": float64(50)}, replay.Filter)
	require.Equal(t, int64(2), replay.Rows)
	require.Equal(t, admin.ActionSkip, skip.Action)
	require.Equal(t, map[string]any{"ids": []any{failed[3].String()}}, skip.Filter)
	require.Equal(t, int64(1), skip.Rows)
	require.Equal(t, admin.ActionPurge, purge.Action)
	require.Equal(t, map[string]any{"status": "SENT", "older_than": "1h0m0s", "limit": float64(admin.DefaultPurgeLimit)}, purge.Filter)
	require.Equal(t, int64(2), purge.Rows)

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3, logs.String())
	require.Contains(t, lines[0], "action=replay")
	require.Contains(t, lines[0], "actor=alice@host")
	require.Contains(t, lines[0], "rows=2")
	require.Contains(t, lines[0], `order.created`)
	require.Contains(t, lines[1], "action=skip")
	require.Contains(t, lines[2], "action=purge")
	require.NotContains(t, logs.String(), string(secret))
}

// The action and its audit row commit together: when the audit row
// cannot be written, the replay, the skip and the purge (its first step,
// the default partition's batch) are rolled back; when the caller's
// transaction that the Admin runs in rolls back, so does the audit row.
// An audited SENT purge commits each step with its own audit row.
func TestAuditIsAtomicWithTheAction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("AuditFails", func(t *testing.T) {
		t.Parallel()
		b, logs := auditSetup(t)
		failed := b.insert(t, row{Status: "FAILED"}, row{Status: "FAILED", Aggregate: "k", FailedAgo: 2 * time.Hour})
		b.insert(t, row{Status: "SENT", SentAgo: 3 * time.Hour})
		old := oldPartition(t, b)
		before := b.snapshot(t)
		refuseAudit(t, b)

		_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: failed[:1], Actor: ops})
		require.ErrorContains(t, err, "audit refused")
		_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: failed[1:], Actor: ops})
		require.ErrorContains(t, err, "audit refused")
		for _, st := range []outbox.Status{outbox.StatusSent, outbox.StatusFailed} {
			n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: st, Actor: ops})
			require.ErrorContains(t, err, "audit refused")
			require.Zero(t, n, "nothing was deleted")
		}
		require.Equal(t, before, b.snapshot(t), "no action took effect")
		require.True(t, partitionExists(t, b, old), "the retired partition was rolled back with the purge")
		require.Empty(t, logs.String(), "an action that did not commit is not logged")
	})

	t.Run("CallerRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		failed := b.insert(t, row{Status: "FAILED"})
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		a, err := admin.New(tx, admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		res, err := a.Replay(ctx, admin.ReplayParams{IDs: failed, Actor: ops})
		require.NoError(t, err)
		require.Len(t, res.Replayed, 1)
		page, err := a.AuditLog(ctx, admin.AuditParams{})
		require.NoError(t, err)
		require.Len(t, page.Entries, 1, "visible in the caller's transaction")
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, "FAILED", b.status(t, failed[0]))
		require.Empty(t, auditRows(t, b))
	})

	t.Run("PurgeAuditsEachStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := oldPartition(t, b)
		b.insert(t, row{Status: "SENT", SentAgo: 3 * time.Hour})
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Hour, Actor: ops})
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "the default partition's row and the retired partition's")
		require.False(t, partitionExists(t, b, old))
		entries := auditRows(t, b)
		require.Len(t, entries, 2, "the partition, then the default partition's batch")
		require.Equal(t, int64(1), entries[0].Rows)
		require.NotContains(t, entries[0].Filter, "up_to")
		require.Equal(t, int64(1), entries[1].Rows)
		require.Contains(t, entries[1].Filter, "up_to")
	})
}

// oldPartition creates a time partition of the history two days back
// holding one SENT row, and returns its name.
func oldPartition(t *testing.T, b *testBundle) string {
	t.Helper()
	ctx := context.Background()
	var from time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now() - interval '2 days')`).Scan(&from))
	name := fmt.Sprintf("outbox_events_s%s", from.UTC().Format("200601021504"))
	_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF outbox_events_sent FOR VALUES FROM ('%s') TO ('%s')`,
		name, from.Format(time.RFC3339), from.Add(time.Hour).Format(time.RFC3339)))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
		VALUES (nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', $1)`, from.Add(time.Minute))
	require.NoError(t, err)
	return name
}

// partitionExists reports whether the test schema holds a table named name.
func partitionExists(t *testing.T, b *testBundle, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, b.db.Schema, name).Scan(&n))
	return n == 1
}

// AuditLog pages newest first by id: pages neither repeat nor skip an
// entry, and the last one has no Next.
func TestAuditLogPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	hostile := &admin.Actor{Name: `<script>alert("x")</script> 'o''neil'`, Source: "api"}
	for range 5 {
		_, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "none", Actor: hostile})
		require.NoError(t, err)
	}
	var seen []int64
	var after int64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		page, err := b.admin.AuditLog(ctx, admin.AuditParams{After: after, Limit: 2})
		require.NoError(t, err)
		for _, e := range page.Entries {
			require.Equal(t, hostile.Name, e.Actor, "stored as given")
			require.Equal(t, "api", e.Source)
			require.Zero(t, e.Rows)
			seen = append(seen, e.ID)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	require.Len(t, seen, 5)
	require.IsDecreasing(t, seen)
}

// A bad actor or audit page is refused before anything runs.
func TestAuditRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failed := b.insert(t, row{Status: "FAILED"})
	before := b.snapshot(t)
	for _, tt := range []struct {
		actor *admin.Actor
		field string
	}{
		{&admin.Actor{Source: "x"}, "Actor.Name"},
		{&admin.Actor{Name: "x"}, "Actor.Source"},
		{&admin.Actor{Name: strings.Repeat("n", admin.MaxActorName+1), Source: "x"}, "Actor.Name"},
		{&admin.Actor{Name: "x", Source: "a\x00b"}, "Actor.Source"},
		{&admin.Actor{Name: "\xff", Source: "x"}, "Actor.Name"},
	} {
		_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: failed, Actor: tt.actor})
		requireInputErr(t, err, tt.field)
		_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: failed, Actor: tt.actor})
		requireInputErr(t, err, tt.field)
		_, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed, Actor: tt.actor})
		requireInputErr(t, err, tt.field)
	}
	require.Equal(t, before, b.snapshot(t))
	require.Empty(t, auditRows(t, b))
	_, err := b.admin.AuditLog(ctx, admin.AuditParams{After: -1})
	requireInputErr(t, err, "After")
	_, err = b.admin.AuditLog(ctx, admin.AuditParams{Limit: admin.MaxAuditLimit + 1})
	requireInputErr(t, err, "Limit")
}

// An action whose Actor.RequestID an audit row holds changes nothing and
// returns ErrAlreadyDone; AuditLog shows the request id.
func TestRequestIDIsSingleUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := auditSetup(t)
	ids := b.insert(t, row{Status: "FAILED"}, row{Status: "FAILED"})
	actor := &admin.Actor{Name: "alice", Source: admin.SourceConsole, RequestID: uuid.New()}
	res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: ids[:1], Actor: actor})
	require.NoError(t, err)
	require.Len(t, res.Replayed, 1)
	before := b.snapshot(t)

	_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: ids[1:], Actor: actor})
	require.ErrorIs(t, err, admin.ErrAlreadyDone)
	_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids[1:], Actor: actor})
	require.ErrorIs(t, err, admin.ErrAlreadyDone)
	_, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed, Actor: actor})
	require.ErrorIs(t, err, admin.ErrAlreadyDone)
	require.Equal(t, before, b.snapshot(t), "a request done already changed rows")

	entries := auditRows(t, b)
	require.Len(t, entries, 1)
	require.Equal(t, actor.RequestID, entries[0].RequestID)

	// Without a request id every call acts and is audited.
	_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: ids[1:], Actor: ops})
	require.NoError(t, err)
	entries = auditRows(t, b)
	require.Len(t, entries, 2)
	require.Equal(t, uuid.Nil, entries[0].RequestID)
}

// Two concurrent calls with one request id: exactly one runs, the other
// returns ErrAlreadyDone.
func TestRequestIDConcurrentCallsRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := auditSetup(t)
	b.insert(t, many(20, row{Status: "FAILED", Type: "t"})...)
	actor := &admin.Actor{Name: "alice", Source: admin.SourceConsole, RequestID: uuid.New()}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	replayed := make([]int, 2)
	for i := range errs {
		wg.Go(func() {
			res, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "t", Limit: 10, Actor: actor})
			errs[i], replayed[i] = err, len(res.Replayed)
		})
	}
	wg.Wait()
	var ran int
	for i, err := range errs {
		if err == nil {
			ran++
			require.Equal(t, 10, replayed[i])
		} else {
			require.ErrorIs(t, err, admin.ErrAlreadyDone)
		}
	}
	require.Equal(t, 1, ran, "exactly one call runs")
	require.Equal(t, 10, b.countWhere(t, "status = 'FAILED'"))
	require.Len(t, auditRows(t, b), 1)
}

// On a schema without the audit table (version 12) an audited action
// fails with an error matching outbox.ErrMissingTable that says what to
// do, and changes nothing; without an Actor it runs.
func TestAuditTableMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := auditSetup(t)
	ids := b.insert(t, row{Status: "FAILED"})
	_, err := b.db.Pool.Exec(ctx, "DROP TABLE outbox_events_audit")
	require.NoError(t, err)
	for _, actor := range []*admin.Actor{ops, {Name: "alice", Source: admin.SourceConsole, RequestID: uuid.New()}} {
		_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: ids, Actor: actor})
		require.ErrorIs(t, err, outbox.ErrMissingTable)
		require.ErrorContains(t, err, "outboxctl migrate")
		require.Equal(t, "FAILED", b.status(t, ids[0]))
	}
	_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: ids})
	require.NoError(t, err)
	require.Equal(t, "PENDING", b.status(t, ids[0]))
}

// Actor.SelectedBy goes into the audit row's filter as "selected_by";
// an action naming more than MaxAuditIDs ids records the first of them
// and their number.
func TestAuditSelectionAndIDsCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, logs := auditSetup(t)
	ids := b.insert(t, many(admin.MaxAuditIDs+50, row{Status: "FAILED"})...)
	by := &admin.Actor{Name: "alice", Source: admin.SourceConsole, SelectedBy: map[string]any{"key": "k1", "from": "2024-05-01"}}
	res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: ids, Actor: by})
	require.NoError(t, err)
	require.Len(t, res.Replayed, len(ids))
	entries := auditRows(t, b)
	require.Len(t, entries, 1)
	f := entries[0].Filter
	require.Equal(t, map[string]any{"key": "k1", "from": "2024-05-01"}, f["selected_by"])
	require.Len(t, f["ids"], admin.MaxAuditIDs)
	require.Equal(t, ids[0].String(), f["ids"].([]any)[0])
	require.InDelta(t, len(ids), f["ids_count"], 0)
	require.Contains(t, logs.String(), "selected_by")

	for _, sel := range []map[string]any{{"k": strings.Repeat("x", admin.MaxSelectedBy)}, {"k": "a\x00b"}, {"k": make(chan int)}} {
		_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids[:1], Actor: &admin.Actor{Name: "a", Source: "s", SelectedBy: sel}})
		requireInputErr(t, err, "Actor.SelectedBy")
	}
	require.Len(t, auditRows(t, b), 1)
}
