package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// planShape lists the plan's nodes in tree order, each with the index or
// relation it reads: what two plans that differ only in their numbers
// share.
func planShape(node map[string]any) []string {
	shape := fmt.Sprint(node["Node Type"], " ", node["Index Name"], node["Relation Name"], " ", node["Subplan Name"])
	out := []string{shape}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		out = append(out, planShape(c.(map[string]any))...)
	}
	return out
}

// A claim of some types is the claim of every type with a filter on the
// type, on the same walk of the due index (schema version 11 has no type
// due index): a claim of 200 types has the plan of a claim of 1, node for
// node, in a custom plan and in the generic one; its locking read scans
// the due index and nothing else, without a sort or a sequential scan.
// The next due time of some types and the count of waiting events of
// other types read the due index too, a bounded part of it.
func TestTypedClaimPlanDoesNotGrowWithTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 40,000 rows")
	}
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO outbox_events (id, event_type, next_attempt_at)
			SELECT gen_random_uuid(), 't' || (i % 200), now() - interval '2 hours' + i * interval '1 ms' FROM generate_series(1, 20000) AS i`,
		`INSERT INTO outbox_events (id, event_type, next_attempt_at)
			SELECT gen_random_uuid(), 'foreign.' || (i % 5), now() - interval '3 hours' + i * interval '1 ms' FROM generate_series(1, 20000) AS i`,
		`ANALYZE outbox_events`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	s, err := New(db.Table())
	require.NoError(t, err)
	many := make([]string, 200)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	shapes := map[string][]string{}
	for _, types := range [][]string{{"t0"}, many} {
		arg := "'{" + strings.Join(types, ",") + "}'"
		explainPrepared(t, db, true, s.sql.typedClaims.none, "int, uuid, text, bigint, text[], uuid[], bool",
			"100, gen_random_uuid(), 'w', 60000000, "+arg+", '{}', false", func(mode string, top map[string]any) {
				total, _, nodes, _ := planBuffers(top)
				due := subPlan(top, "CTE due")
				_, _, dueNodes, dueIndexes := planBuffers(due)
				text, _ := json.Marshal(top)
				t.Logf("%s: a claim of 100 of %d types: %v buffers", mode, len(types), total)
				require.EqualValues(t, 100, top["Actual Rows"], "%s: %s", mode, text)
				require.Equal(t, map[string]bool{"outbox_events_due_idx": true}, dueIndexes, "%s: %s", mode, text)
				for _, n := range []string{"Seq Scan", "Sort", "Bitmap Heap Scan"} {
					require.False(t, nodes[n] || dueNodes[n], "%s: %s in %s", mode, n, text)
				}
				key := mode
				if prev, ok := shapes[key]; ok {
					require.Equal(t, prev, planShape(top), "%s: the plan of 200 types differs from that of 1: %s", mode, text)
				}
				shapes[key] = planShape(top)
			})
	}
	t.Run("next due", func(t *testing.T) {
		for _, types := range []string{"'{t0}'", "'{nothing}'"} {
			explainPrepared(t, db, false, s.sql.typedNextDue, "text[]", types, func(mode string, top map[string]any) {
				buffers, _, nodes, indexes := planBuffers(top)
				text, _ := json.Marshal(top)
				t.Logf("%s: next due of %s: %v buffers", mode, types, buffers)
				require.Less(t, buffers, 2*float64(nextDueWindow)+100, "%s: %s", mode, text)
				require.Equal(t, map[string]bool{"outbox_events_due_idx": true}, indexes, "%s: %s", mode, text)
				require.False(t, nodes["Seq Scan"] || nodes["Sort"], "%s: %s", mode, text)
			})
		}
	})
	t.Run("waiting", func(t *testing.T) {
		explainPrepared(t, db, true, s.sql.waiting, "text[], bigint, int, int", "'{t0}', 60000000, 1000, 1000", func(mode string, top map[string]any) {
			buffers, _, nodes, indexes := planBuffers(top)
			text, _ := json.Marshal(top)
			t.Logf("%s: waiting count, %d rows of the due index at most: %v buffers", mode, maxWaitingRows, buffers)
			require.Equal(t, map[string]bool{"outbox_events_due_idx": true}, indexes, "%s: %s", mode, text)
			require.EqualValues(t, 5, top["Actual Rows"], "the rows due longest are of the 5 foreign types: %s", text)
			require.Less(t, buffers, 2.0*maxWaitingRows, "%s: %s", mode, text)
			require.False(t, nodes["Seq Scan"], "%s: %s", mode, text)
		})
	})
}
