package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// filterRemoved sums "Rows Removed by Filter" and "Rows Removed by Join
// Filter" over an EXPLAIN (FORMAT JSON) plan tree, but for those of a
// Function Scan: the unnest() of a statement's own parameters (the failed
// statement reads its failures twice, keeping the final ones in one
// pass and the others in the other).
func filterRemoved(node map[string]any) float64 {
	n, _ := node["Rows Removed by Filter"].(float64)
	if node["Node Type"] == "Function Scan" {
		n = 0
	}
	j, _ := node["Rows Removed by Join Filter"].(float64)
	n += j
	for _, key := range []string{"Plans"} {
		children, _ := node[key].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				n += filterRemoved(m)
			}
		}
	}
	return n
}

// A recovery of a bounded batch costs in proportion to the batch, not to
// the number of expired leases nor to the backlog: with 20,000 expired
// leases and 200,000 PENDING rows, recovering 100 must not filter its way
// through the others. It finds them through the held index (never a
// sequential scan), in locked_at order; so does the release of a claim's
// rows by token (releaseToken), which reads the held rows only.
func TestRecoverPlanIsProportionalToTheBatch(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type)
		SELECT gen_random_uuid(), 'x' FROM generate_series(1, 200000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, lock_token, locked_at, lease_until, started_at)
		SELECT gen_random_uuid(), 'x', 'PROCESSING', gen_random_uuid(), now() - interval '2 minutes', now() - interval '1 minute', now()
		FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	// Statistics as after a first ANALYZE of a quiet table, before the
	// leases expired en masse (autovacuum may not have caught up).
	s, err := New(db.Table())
	require.NoError(t, err)

	// Both plans a prepared statement can get: a custom one, and the
	// generic one PostgreSQL switches to after five executions.
	conn := db.Conn(t)
	_, err = conn.Exec(ctx, "PREPARE recover_plan(int, int, bool) AS "+s.sql.recover)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE release_plan(uuid) AS "+s.sql.releaseToken)
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		for _, st := range []string{"recover_plan(100, 0, false)", "release_plan(gen_random_uuid())"} {
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			var plan []map[string]any
			require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE "+st).Scan(&plan))
			require.NoError(t, tx.Rollback(ctx))
			top := plan[0]["Plan"].(map[string]any)
			_, removed, nodes, indexes := planBuffers(top)
			text, _ := json.Marshal(top)
			require.True(t, indexes["outbox_events_held_idx"], "%s %s: %s", mode, st, text)
			require.False(t, nodes["Seq Scan"], "%s %s: %s", mode, st, text)
			if st == "recover_plan(100, 0, false)" {
				require.Less(t, removed, 1000.0, "%s: recovering 100 rows filtered %v rows: %s", mode, removed, text)
				require.EqualValues(t, 100, top["Actual Rows"], "%s: past a cap of 0, every row moves: %s", mode, text)
			}
		}
	}
}

// Completions, renewals, start marks, releases and outcome reads of B
// held rows reach them through the primary key and cost in proportion to
// B, not to the rows held by every dispatcher nor to B²: with statistics
// that say almost nothing is PROCESSING (taken before a burst) the planner
// had scanned the lease index (now the held index) and tested each of its
// rows against the whole id array, and with fresh ones joined the rows to
// the ids in a nested loop. The moves (a success into the SENT history, a
// final failure into the dead letters) insert what they deleted, without
// a scan of the table they insert into. The statements run under customPlans (see
// TestHeldRowBatchesUseCustomPlans), so custom plans are what is checked.
func TestHeldRowStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("fresh statistics=%v", fresh), func(t *testing.T) {
			t.Parallel()
			checkHeldRowPlans(t, fresh)
		})
	}
}

func checkHeldRowPlans(t *testing.T, freshStats bool) {
	const b = 3000
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type)
		SELECT gen_random_uuid(), 'x' FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)
	token := "7d1e5bd2-8c1f-4a53-9a55-2f6f0c5b1c01"
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, lock_token, lease_until, started_at)
		SELECT gen_random_uuid(), 'x', 'PROCESSING', CASE WHEN i <= $2 THEN $1::uuid ELSE gen_random_uuid() END,
			now() + interval '1 hour', now()
		FROM generate_series(1, 20000) AS i`, token, b)
	require.NoError(t, err)
	if freshStats {
		_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
		require.NoError(t, err)
	}
	var ids string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id)::text FROM outbox_events WHERE lock_token = $1`, token).Scan(&ids))
	s, err := New(db.Table())
	require.NoError(t, err)

	fill := func(value string) string { return fmt.Sprintf("array_fill(%s, ARRAY[%d])", value, b) }
	idsTokens := "'" + ids + "', '" + token + "'"
	idsTokenArray := "'" + ids + "', " + fill("'"+token+"'::uuid")
	statements := []struct {
		name, sql, params, args string
	}{
		{"sent", s.sql.sent, "uuid[], uuid", idsTokens},
		{"deleteSent", s.sql.deleteSent, "uuid[], uuid", idsTokens},
		{"failed", s.sql.failed, "uuid[], uuid, text[], text[], bool[], bigint[], bool[]", idsTokens + ", " +
			fill("'c'::text") + ", " + fill("'m'::text") + ", " + fill("false") + ", " + fill("0::bigint") + ", " + fill("false")},
		{"failedFinal", s.sql.failed, "uuid[], uuid, text[], text[], bool[], bigint[], bool[]", idsTokens + ", " +
			fill("'c'::text") + ", " + fill("'m'::text") + ", " + fill("true") + ", " + fill("0::bigint") + ", " + fill("false")},
		{"outcomes", s.sql.outcomes, "uuid[], uuid", idsTokens},
		{"renew", s.sql.renew, "uuid[], uuid[], bigint", idsTokenArray + ", 60000000"},
		{"start", s.sql.start, "uuid[], uuid[]", idsTokenArray},
		{"release", s.sql.release, "uuid[], uuid[]", idsTokenArray},
	}
	conn := db.Conn(t)
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_custom_plan")
	require.NoError(t, err)
	for _, st := range statements {
		_, err = conn.Exec(ctx, "PREPARE "+st.name+"_plan("+st.params+") AS "+st.sql)
		require.NoError(t, err, st.name)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		var plan []map[string]any
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+st.name+"_plan("+st.args+")").Scan(&plan), st.name)
		require.NoError(t, tx.Rollback(ctx))
		top := plan[0]["Plan"].(map[string]any)
		text, _ := json.Marshal(top)
		require.Less(t, filterRemoved(top), 1000.0, "%s filtered its way through rows it does not name: %s", st.name, text)
		require.NotContains(t, string(text), "held_idx", st.name)
		require.NotContains(t, string(text), `"Seq Scan"`, st.name)
	}
}

// The batches of statements that name held rows run with custom plans: a
// renewal run ten times on one connection (where pgx prepares it, and
// PostgreSQL would switch to a generic plan from the sixth execution) was
// never run with a generic plan.
func TestHeldRowBatchesUseCustomPlans(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type) SELECT gen_random_uuid(), 'x' FROM generate_series(1, 10)`)
	require.NoError(t, err)
	s, err := New(db.Table())
	require.NoError(t, err)
	conn := db.Conn(t)
	b, err := s.Claim(ctx, conn, ClaimParams{Owner: "t", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	for range 10 {
		res, err := s.Renew(ctx, conn, b.Refs(), time.Minute)
		require.NoError(t, err)
		require.Len(t, res.Done, 10)
	}
	var generic, custom int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		s.sql.renew).Scan(&generic, &custom))
	require.Zero(t, generic)
	require.EqualValues(t, 10, custom)
}
