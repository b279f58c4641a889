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
