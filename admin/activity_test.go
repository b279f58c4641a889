package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
)

// setLog gives row id (wherever it lives) an attempt log of one entry
// per age: an attempt with outcome that ended that long ago by the
// database clock.
func (b *testBundle) setLog(t *testing.T, id uuid.UUID, outcome string, ages ...time.Duration) {
	t.Helper()
	micros := make([]int64, len(ages))
	for i, a := range ages {
		micros[i] = a.Microseconds()
	}
	for _, table := range []string{"outbox_events", "outbox_events_dead", "outbox_events_sent"} {
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+table+` SET attempt_log = (
			SELECT jsonb_agg(jsonb_build_object('attempt', n, 'outcome', $2::text, 'code', 'timeout', 'message', 'm',
				'owner', 'w', 'started', now() - a * interval '1 microsecond', 'ended', now() - a * interval '1 microsecond'))
			FROM unnest($3::bigint[]) WITH ORDINALITY AS x(a, n)) WHERE id = $1`, id, outcome, micros)
		require.NoError(t, err)
	}
}

// Activity counts the events sent and failed in the window, the retries
// that ended in it (in the logs of rows sent, failed, pending or
// processing), and lists the lease owners with the rows they hold.
func TestActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sent := b.insert(t, row{Status: "SENT", SentAgo: 30 * time.Second}, row{Status: "SENT", SentAgo: time.Minute},
		row{Status: "SENT", SentAgo: 2 * time.Minute}, row{Status: "SENT", SentAgo: 2 * time.Hour})
	failed := b.insert(t, row{Status: "FAILED", FailedAgo: time.Minute}, row{Status: "FAILED", FailedAgo: 2 * time.Minute},
		row{Status: "FAILED", FailedAgo: 3 * time.Hour})
	pending := b.insert(t, row{DueIn: 5 * time.Minute}, row{}, row{DueIn: -2 * time.Hour})
	processing := b.insert(t, row{Status: "PROCESSING"}, row{Status: "PROCESSING"}, row{Status: "PROCESSING"})
	_, err := b.db.Pool.Exec(ctx, `UPDATE outbox_events SET lock_owner = 'worker-2', heartbeat_at = now() - interval '3 seconds'
		WHERE id = $1`, processing[2])
	require.NoError(t, err)

	b.setLog(t, sent[0], "retry", 40*time.Second, 3*time.Hour)     // one retry in the window
	b.setLog(t, failed[0], "retry", 2*time.Minute, 90*time.Second) // two
	b.setLog(t, pending[0], "retry", time.Minute)                  // one, due later
	b.setLog(t, pending[1], "retry", 3*time.Hour)                  // none: too old
	b.setLog(t, pending[2], "retry", time.Minute)                  // not read: due before the window (cannot be)
	b.setLog(t, processing[0], "retry", 20*time.Second)            // one
	b.setLog(t, failed[1], "failed", time.Minute)                  // not a retry
	b.setLog(t, sent[3], "retry", 2*time.Hour+time.Second)         // outside
	b.setLog(t, failed[2], "retry", 4*time.Minute, 3*time.Hour)    // its row failed outside the window: not read

	act, err := b.admin.Activity(ctx, 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, act.Window)
	require.Equal(t, int64(3), act.Sent)
	require.Equal(t, int64(2), act.Failed)
	require.Equal(t, int64(5), act.Retried)
	require.False(t, act.SentCapped || act.FailedCapped || act.RetriedCapped)
	require.Len(t, act.Replicas, 2)
	require.Equal(t, "worker-1", act.Replicas[0].Owner)
	require.Equal(t, int64(2), act.Replicas[0].Holding)
	require.Equal(t, "worker-2", act.Replicas[1].Owner)
	require.Equal(t, int64(1), act.Replicas[1].Holding)
	var beat, claimed time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT heartbeat_at FROM outbox_events WHERE id = $1`, processing[2]).Scan(&beat))
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT max(locked_at) FROM outbox_events WHERE id = ANY($1)`,
		processing[:2]).Scan(&claimed))
	require.True(t, beat.Equal(act.Replicas[1].LastHeartbeat), "the latest renewal")
	require.True(t, claimed.Equal(act.Replicas[0].LastHeartbeat), "the claim time when never renewed")

	act, err = b.admin.Activity(ctx, admin.MaxActivityWindow)
	require.NoError(t, err)
	require.Equal(t, int64(3), act.Sent, "two hours ago is outside the hour")

	empty := setup(t)
	act, err = empty.admin.Activity(ctx, admin.MinActivityWindow)
	require.NoError(t, err)
	require.Equal(t, admin.Activity{Window: time.Minute, Replicas: []admin.Replica{}, At: act.At}, act)
}

// Key matches the order key: the partition key, else the aggregate id;
// CreatedAfter and CreatedBefore bound created_at to [after, before). Count
// counts what List pages through.
func TestListAndCountFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t,
		row{Aggregate: "a1", CreatedAgo: 2 * time.Hour},
		row{Status: "SENT", Partition: "a1", Aggregate: "zzz", CreatedAgo: 30 * time.Minute},
		row{Status: "FAILED", Aggregate: "a1", Partition: "p9", CreatedAgo: time.Minute},
		row{Status: "FAILED", Aggregate: "a1", CreatedAgo: time.Minute},
		row{Status: "PROCESSING", Partition: "a1"},
		row{Status: "SENT", Aggregate: "a2", CreatedAgo: 2 * time.Hour})
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	for _, tt := range []struct {
		name string
		p    admin.ListParams
		want []uuid.UUID
	}{
		{"Key", admin.ListParams{Key: "a1"}, []uuid.UUID{ids[0], ids[1], ids[3], ids[4]}},
		{"KeyPartition", admin.ListParams{Key: "p9"}, []uuid.UUID{ids[2]}},
		{"KeySent", admin.ListParams{Key: "a1", Status: "SENT"}, []uuid.UUID{ids[1]}},
		{"KeyFailed", admin.ListParams{Key: "a1", Status: "FAILED"}, []uuid.UUID{ids[3]}},
		{"CreatedAfter", admin.ListParams{CreatedAfter: now.Add(-time.Hour)}, []uuid.UUID{ids[1], ids[2], ids[3], ids[4]}},
		{"CreatedBefore", admin.ListParams{CreatedBefore: now.Add(-10 * time.Minute)}, []uuid.UUID{ids[0], ids[1], ids[5]}},
		{"CreatedBetween", admin.ListParams{CreatedAfter: now.Add(-time.Hour), CreatedBefore: now.Add(-10 * time.Minute)},
			[]uuid.UUID{ids[1]}},
		{"SentCreatedAfter", admin.ListParams{Status: "SENT", CreatedAfter: now.Add(-time.Hour)}, []uuid.UUID{ids[1]}},
		{"KeyAndType", admin.ListParams{Key: "a1", Type: "test.event", CreatedAfter: now.Add(-time.Hour)},
			[]uuid.UUID{ids[1], ids[3], ids[4]}},
		{"None", admin.ListParams{Key: "nope"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			page, err := b.admin.List(ctx, tt.p)
			require.NoError(t, err)
			var got []uuid.UUID
			for _, r := range page.Events {
				got = append(got, r.ID)
			}
			require.Equal(t, tt.want, got)
			require.True(t, page.Next.IsZero())
			n, err := b.admin.Count(ctx, tt.p)
			require.NoError(t, err)
			require.Equal(t, admin.CountResult{N: int64(len(tt.want))}, n)
		})
	}
}

// Count stops at MaxCount, and reads at most MaxCount history rows for a
// filter the history has no index for: either way Capped says N is a
// lower bound.
func TestCountIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100,005 rows")
	}
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at, last_error_code)
		SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', now(),
			CASE WHEN i > $1 THEN 'late' END
		FROM generate_series(1, $1 + 5) AS i`, admin.MaxCount)
	require.NoError(t, err)
	b.insert(t, row{Status: "FAILED", Code: "late"})
	for _, tt := range []struct {
		p    admin.ListParams
		want admin.CountResult
	}{
		{admin.ListParams{}, admin.CountResult{N: admin.MaxCount, Capped: true}},
		{admin.ListParams{Status: "SENT", Type: "t"}, admin.CountResult{N: admin.MaxCount, Capped: true}},
		// The 5 SENT rows with the code come after the first MaxCount
		// history rows: not read.
		{admin.ListParams{Code: "late"}, admin.CountResult{N: 1, Capped: true}},
		{admin.ListParams{Status: "FAILED", Code: "late"}, admin.CountResult{N: 1}},
		{admin.ListParams{Status: "PENDING"}, admin.CountResult{}},
	} {
		got, err := b.admin.Count(ctx, tt.p)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, "%+v", tt.p)
	}
}
