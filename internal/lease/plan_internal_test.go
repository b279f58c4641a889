package lease

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// filterRemoved sums "Rows Removed by Filter" over an EXPLAIN (FORMAT
// JSON) plan tree.
func filterRemoved(node map[string]any) float64 {
	n, _ := node["Rows Removed by Filter"].(float64)
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
// the number of expired leases: with 20,000 expired leases among 220,000 rows, recovering 100
// must not filter its way through the others.
func TestRecoverPlanIsProportionalToTheBatch(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at)
		SELECT gen_random_uuid(), 'x', 'SENT', now() FROM generate_series(1, 200000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, lock_token, lease_until, started_at)
		SELECT gen_random_uuid(), 'x', 'PROCESSING', gen_random_uuid(), now() - interval '1 minute', now()
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
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		var plan []map[string]any
		require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE recover_plan(100, 3, false)").Scan(&plan))
		top := plan[0]["Plan"].(map[string]any)
		removed := filterRemoved(top)
		text, _ := json.Marshal(top)
		require.Less(t, removed, 1000.0, "%s: recovering 100 rows filtered %v rows: %s", mode, removed, text)
	}
}

// Completions and renewals of B held rows reach them through the primary
// key and cost in proportion to B, not to the number of rows held by every
// dispatcher: with statistics that say almost nothing is PROCESSING (taken
// before a burst), the planner had scanned the lease index and tested
// each of its 20,000 rows against the whole id array.
func TestHeldRowStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at)
		SELECT gen_random_uuid(), 'x', 'SENT', now() FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)
	token := "7d1e5bd2-8c1f-4a53-9a55-2f6f0c5b1c01"
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, lock_token, lease_until, started_at)
		SELECT gen_random_uuid(), 'x', 'PROCESSING', CASE WHEN i <= 1000 THEN $1::uuid ELSE gen_random_uuid() END,
			now() + interval '1 hour', now()
		FROM generate_series(1, 20000) AS i`, token)
	require.NoError(t, err)
	var ids string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id)::text FROM outbox_events WHERE lock_token = $1`, token).Scan(&ids))
	s, err := New(db.Table())
	require.NoError(t, err)

	statements := []struct {
		name, sql, params, args string
	}{
		{"sent", s.sql.sent, "uuid[], uuid", "'" + ids + "', '" + token + "'"},
		{"deleteSent", s.sql.deleteSent, "uuid[], uuid", "'" + ids + "', '" + token + "'"},
		{"failed", s.sql.failed, "uuid[], uuid, text[], text[], bool[], bigint[], bool[]", "'" + ids + "', '" + token + "', " +
			"array_fill('c'::text, ARRAY[1000]), array_fill('m'::text, ARRAY[1000]), array_fill(false, ARRAY[1000]), " +
			"array_fill(0::bigint, ARRAY[1000]), array_fill(false, ARRAY[1000])"},
		{"renew", s.sql.renew, "uuid[], uuid[], bigint", "'" + ids + "', array_fill('" + token + "'::uuid, ARRAY[1000]), 60000000"},
	}
	conn := db.Conn(t)
	for _, st := range statements {
		_, err = conn.Exec(ctx, "PREPARE "+st.name+"_plan("+st.params+") AS "+st.sql)
		require.NoError(t, err, st.name)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			var plan []map[string]any
			require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+st.name+"_plan("+st.args+")").Scan(&plan), st.name)
			require.NoError(t, tx.Rollback(ctx))
			top := plan[0]["Plan"].(map[string]any)
			text, _ := json.Marshal(top)
			require.Less(t, filterRemoved(top), 1000.0, "%s, %s: filtered its way through the held rows: %s", st.name, mode, text)
			require.NotContains(t, string(text), "lease_idx", "%s, %s", st.name, mode)
		}
	}
}
