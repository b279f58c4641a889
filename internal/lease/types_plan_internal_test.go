package lease

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// planBuffers sums the shared buffers (hit and read) of the top node of
// an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan, and the Rows Removed by
// Filter of the whole tree; it reports the kinds of node and the indexes
// the plan used.
func planBuffers(top map[string]any) (buffers, removed float64, nodes, indexes map[string]bool) {
	hit, _ := top["Shared Hit Blocks"].(float64)
	read, _ := top["Shared Read Blocks"].(float64)
	nodes, indexes = map[string]bool{}, map[string]bool{}
	var walk func(map[string]any)
	walk = func(n map[string]any) {
		nodes[n["Node Type"].(string)] = true
		if name, ok := n["Index Name"].(string); ok {
			indexes[name] = true
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(top)
	return hit + read, filterRemoved(top), nodes, indexes
}

// subPlan returns the node of the plan tree whose Subplan Name is name.
func subPlan(node map[string]any, name string) map[string]any {
	if node["Subplan Name"] == name {
		return node
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if found := subPlan(c.(map[string]any), name); found != nil {
			return found
		}
	}
	return nil
}

// explainPrepared runs EXPLAIN (ANALYZE, BUFFERS) of sql with args,
// prepared, in a transaction it rolls back, under typedPlans when typed
// (as the store runs it), once with a
// custom plan and once with the generic plan a prepared statement may
// switch to, and hands each plan's top node to check.
func explainPrepared(t *testing.T, db *testdb.DB, typed bool, sql, params, args string, check func(mode string, top map[string]any)) {
	t.Helper()
	ctx := context.Background()
	conn := db.Conn(t)
	_, err := conn.Exec(ctx, "PREPARE plan_under_test("+params+") AS "+sql)
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		if typed {
			_, err = tx.Exec(ctx, typedPlans)
			require.NoError(t, err)
		}
		var plan []map[string]any
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE plan_under_test("+args+")").Scan(&plan))
		require.NoError(t, tx.Rollback(ctx))
		_, jit := plan[0]["JIT"]
		require.False(t, jit, "%s: compiled with JIT (1.5s for a few rows)", mode)
		check(mode, plan[0]["Plan"].(map[string]any))
	}
}

// A claim of some types never reads the rows of other types: with
// 100,000 due events of five types it does not handle (and 20,000 SENT
// rows, and 20,000 due rows of one of its own types), a claim of 100 reads
// a few hundred buffers, walking the type due index once per type in due
// order, without a sort or a sequential scan, in a custom plan and in the
// generic one. So does the search for the next due time, and the count of
// waiting events of other types stops at its bound per type.
func TestTypedClaimPlanIgnoresForeignBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 140,000 rows")
	}
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO outbox_events (id, event_type, status, sent_at) SELECT gen_random_uuid(), 'a', 'SENT', now() FROM generate_series(1, 20000)`,
		`INSERT INTO outbox_events (id, event_type, next_attempt_at)
			SELECT gen_random_uuid(), 'foreign.' || (i % 5), now() - interval '2 hours' + i * interval '1 ms' FROM generate_series(1, 100000) AS i`,
		`INSERT INTO outbox_events (id, event_type, next_attempt_at)
			SELECT gen_random_uuid(), 'a', now() - interval '1 hour' + i * interval '1 ms' FROM generate_series(1, 20000) AS i`,
		`INSERT INTO outbox_events (id, event_type, next_attempt_at)
			SELECT gen_random_uuid(), 'b', now() - interval '1 hour' + i * interval '1 ms' FROM generate_series(1, 100) AS i`,
		`ANALYZE outbox_events`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	s, err := New(db.Table())
	require.NoError(t, err)
	typed := s.typedStatements(2)

	t.Run("claim", func(t *testing.T) {
		explainPrepared(t, db, true, typed.claims.none, "int, uuid, text, bigint, text[], uuid[], bool",
			"100, gen_random_uuid(), 'w', 60000000, '{a,b}', '{}', false", func(mode string, top map[string]any) {
				total, removed, nodes, indexes := planBuffers(top)
				due, _, _, _ := planBuffers(subPlan(top, "CTE due"))
				text, _ := json.Marshal(top)
				t.Logf("%s: a claim of 100 of 2 types among 100,000 due rows of other types: %v buffers to lock, %v in all", mode, due, total)
				require.EqualValues(t, 100, top["Actual Rows"], mode)
				require.Less(t, due, 500.0, "%s: %s", mode, text)
				require.Less(t, total, 3000.0, "%s: %s", mode, text)
				require.Less(t, removed, 100.0, "%s: %s", mode, text)
				require.True(t, indexes["outbox_events_type_due_idx"], "%s: %s", mode, text)
				require.False(t, indexes["outbox_events_type_idx"], "%s: the operator type index, over every row that is not PROCESSING: %s", mode, text)
				for _, n := range []string{"Seq Scan", "Sort", "Bitmap Heap Scan"} {
					require.False(t, nodes[n], "%s: %s in %s", mode, n, text)
				}
			})
	})
	t.Run("next due", func(t *testing.T) {
		explainPrepared(t, db, false, typed.nextDue, "text[]", "'{a,b}'", func(mode string, top map[string]any) {
			buffers, _, nodes, indexes := planBuffers(top)
			text, _ := json.Marshal(top)
			require.Less(t, buffers, 50.0, "%s: %s", mode, text)
			require.True(t, indexes["outbox_events_type_due_idx"], "%s: %s", mode, text)
			require.False(t, nodes["Seq Scan"] || nodes["Sort"], "%s: %s", mode, text)
		})
	})
	t.Run("waiting", func(t *testing.T) {
		explainPrepared(t, db, true, s.sql.waiting, "text[], bigint, int, int", "'{a,b}', 60000000, 1000, 100", func(mode string, top map[string]any) {
			buffers, _, nodes, indexes := planBuffers(top)
			text, _ := json.Marshal(top)
			require.True(t, indexes["outbox_events_type_due_idx"], "%s: %s", mode, text)
			t.Logf("%s: waiting count of 5 other types, 1,000 at most each: %v buffers", mode, buffers)
			require.EqualValues(t, 5, top["Actual Rows"], mode)
			require.Less(t, buffers, 6000.0, "%s: %s", mode, text)
			require.False(t, nodes["Seq Scan"], "%s: %s", mode, text)
		})
	})
	t.Run("the claim of every type still walks the due index", func(t *testing.T) {
		explainPrepared(t, db, false, s.sql.claims.none, "int, uuid, text, bigint, uuid[], bool",
			"100, gen_random_uuid(), 'w', 60000000, '{}', false", func(mode string, top map[string]any) {
				_, _, nodes, indexes := planBuffers(top)
				text, _ := json.Marshal(top)
				require.True(t, indexes["outbox_events_due_idx"], "%s: %s", mode, text)
				require.False(t, indexes["outbox_events_type_due_idx"], "%s: %s", mode, text)
				require.False(t, nodes["Sort"], "%s: %s", mode, text)
			})
	})
}
