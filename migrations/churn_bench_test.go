package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// BenchmarkQueueChurn backs the fillfactor choice in docs/schema.md: each
// op is one event going PENDING → PROCESSING → SENT through a claim and a
// completion shaped like the lease package's, in batches of 100. It
// reports how many of those updates put the new row version on the same
// heap page, how many were HOT, and the heap and index sizes at the end.
// Run it with a fixed count so both fill factors see the same rows:
//
//	go test ./migrations/ -run '^$' -bench QueueChurn -benchtime 200000x
func BenchmarkQueueChurn(b *testing.B) {
	for _, scenario := range []string{"backlog", "steady"} {
		for _, ff := range []int{100, 80} {
			b.Run(fmt.Sprintf("%s/fillfactor=%d", scenario, ff), func(b *testing.B) {
				runChurn(b, scenario == "backlog", ff)
			})
		}
	}
}

const (
	churnBatch = 100
	churnClaim = `WITH due AS MATERIALIZED (
	SELECT id, ctid AS old FROM outbox_events
	WHERE status = 'PENDING' AND next_attempt_at <= now()
	ORDER BY next_attempt_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE outbox_events AS o
SET status = 'PROCESSING', lock_token = $2, lock_owner = 'bench', locked_at = now(),
	heartbeat_at = now(), lease_until = now() + interval '30 seconds'
FROM due WHERE o.id = due.id
RETURNING o.id, o.ctid::text, (due.old::text::point)[0] = (o.ctid::text::point)[0]`
	churnSent = `UPDATE outbox_events AS o
SET status = 'SENT', sent_at = now(), attempts = o.attempts + 1,
	lock_token = NULL, lease_until = NULL, heartbeat_at = NULL,
	attempt_log = o.attempt_log || jsonb_build_array(jsonb_build_object(
		'attempt', o.attempts + 1, 'outcome', 'sent', 'owner', o.lock_owner, 'started', o.locked_at, 'ended', now()))
FROM unnest($1::uuid[], $2::tid[]) AS x(id, old)
WHERE o.id = x.id AND o.lock_token = $3
RETURNING (x.old::text::point)[0] = (o.ctid::text::point)[0]`
	churnInsert = `INSERT INTO outbox_events (id, event_type, aggregate_type, aggregate_id, content_type, payload, headers)
SELECT gen_random_uuid(), 'order.created', 'order', g::text, 'application/json',
	convert_to(repeat('{"k":"v"}', 30), 'UTF8'), '{"trace":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
FROM generate_series(1, $1) AS g`
)

func runChurn(b *testing.B, backlog bool, fillfactor int) {
	ctx := context.Background()
	db := testdb.NewMigrated(b)
	conn := db.Conn(b)
	mustExecB(b, conn, fmt.Sprintf("ALTER TABLE outbox_events SET (fillfactor = %d)", fillfactor))
	if backlog {
		for n := 0; n < b.N; n += 10_000 {
			mustExecB(b, conn, churnInsert, min(10_000, b.N-n))
		}
	}
	var updates, samePage int
	b.ResetTimer()
	for done := 0; done < b.N; done += churnBatch {
		if !backlog {
			mustExecB(b, conn, churnInsert, min(churnBatch, b.N-done))
		}
		u, s := claimAndSend(ctx, b, conn)
		updates, samePage = updates+u, samePage+s
	}
	b.StopTimer()
	require.NoError(b, conn.Close(ctx))
	reportChurn(b, db, updates, samePage)
}

// claimAndSend moves one batch PENDING → PROCESSING → SENT and returns the
// number of row updates and how many stayed on their page.
func claimAndSend(ctx context.Context, b *testing.B, conn *pgx.Conn) (updates, samePage int) {
	token := uuid.New()
	rows, err := conn.Query(ctx, churnClaim, churnBatch, token)
	require.NoError(b, err)
	var ids []uuid.UUID
	var ctids []string
	var id uuid.UUID
	var ctid string
	var same bool
	_, err = pgx.ForEachRow(rows, []any{&id, &ctid, &same}, func() error {
		ids, ctids = append(ids, id), append(ctids, ctid)
		samePage += boolInt(same)
		return nil
	})
	require.NoError(b, err)
	rows, err = conn.Query(ctx, churnSent, ids, ctids, token)
	require.NoError(b, err)
	_, err = pgx.ForEachRow(rows, []any{&same}, func() error {
		samePage += boolInt(same)
		return nil
	})
	require.NoError(b, err)
	return 2 * len(ids), samePage
}

// reportChurn waits for the closed session's statistics to arrive, then
// reports the share of same-page and HOT updates and the sizes.
func reportChurn(b *testing.B, db *testdb.DB, updates, samePage int) {
	ctx := context.Background()
	var upd, hot int64
	var heap, idx float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		err := db.Pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd,
			pg_relation_size(relid) / 1048576.0, pg_indexes_size(relid) / 1048576.0
			FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass`).Scan(&upd, &hot, &heap, &idx)
		require.NoError(b, err)
		if upd >= int64(updates) {
			break
		}
	}
	b.ReportMetric(100*float64(samePage)/float64(updates), "samepage-%")
	b.ReportMetric(100*float64(hot)/float64(max(upd, 1)), "hot-%")
	b.ReportMetric(heap, "heap-MB")
	b.ReportMetric(idx, "index-MB")
}

func mustExecB(b *testing.B, conn *pgx.Conn, sql string, args ...any) {
	b.Helper()
	_, err := conn.Exec(context.Background(), sql, args...)
	require.NoError(b, err)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
