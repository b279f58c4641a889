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

// orderedBacklogs are the tables the ordered claim's plan is checked on:
// each has 90,000 SENT keyed rows in the SENT history, 10,000 dead letters
// of other keys (the dead order index that the head policy BlockKey
// probes) and the due rows of its case; limit is the most buffers a claim
// of 100 may touch.
var orderedBacklogs = []struct {
	name  string
	rows  []string
	limit float64
}{
	{"100 keys of 100 due rows", []string{
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'key-' || (i % 100), now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
	}, 5000},
	{"1 hot key with 10,000 due rows", []string{
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'hot', now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
	}, 5000},
	{"1 hot key whose 20,000 sent events are not vacuumed yet", []string{
		`ALTER TABLE outbox_events SET (autovacuum_enabled = off)`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'hot', now() - interval '3 hours' FROM generate_series(1, 20000) AS i`,
		`DELETE FROM outbox_events WHERE partition_key = 'hot'`, // moved to the history: dead index entries until VACUUM
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'hot', now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
	}, 5000},
	{"a blocked key with 10,000 due rows before 100 due rows of other keys", []string{
		`INSERT INTO outbox_events (id, event_type, partition_key, status, lock_token, lease_until)
			VALUES (gen_random_uuid(), 'a', 'blocked', 'PROCESSING', gen_random_uuid(), now() + interval '1 hour')`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'blocked', now() - interval '2 hours' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'b', 'key-' || i, now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 100) AS i`,
	}, 10000},
	{"a key blocked by a dead letter, with 10,000 due rows before 100 due rows of other keys", []string{
		`INSERT INTO outbox_events_dead (id, seq, event_type, partition_key, status, failed_at)
			VALUES (gen_random_uuid(), 0, 'a', 'blocked', 'FAILED', now())`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'blocked', now() - interval '2 hours' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'b', 'key-' || i, now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 100) AS i`,
	}, 10000},
}

// orderedHistory fills the SENT history and the dead letters of the
// order plan tests, and analyzes the three tables after rows.
func orderedHistory(rows ...string) []string {
	return append(append([]string{
		`INSERT INTO outbox_events_sent (id, seq, event_type, partition_key, status, sent_at)
			SELECT gen_random_uuid(), -i, 'a', 'key-' || (i % 1000), 'SENT', now() FROM generate_series(1, 90000) AS i`,
		`INSERT INTO outbox_events_dead (id, seq, event_type, partition_key, status, failed_at)
			SELECT gen_random_uuid(), -i, 'a', 'dead-' || (i % 1000), 'FAILED', now() FROM generate_series(1, 10000) AS i`,
	}, rows...), `ANALYZE outbox_events`, `ANALYZE outbox_events_sent`, `ANALYZE outbox_events_dead`)
}

// The ordered claim reaches the head of each candidate's key and the
// barrier of each claimed key through the order index, and their dead
// letters (head policy BlockKey) through the dead order index, never by a
// sequential scan, in a custom plan and in the generic one, of every type
// and typed; each case logs the buffers a claim of 100 touches. The head
// of a key is probed once per claim, not once per row of the key, so the
// entries of a hot key's sent events that VACUUM has not removed yet are
// read once, and a blocked key's due backlog is passed over without a
// probe per row; neither takes the claim's limit. The next head due
// (NextHeadDue) walks the due index without a sequential scan; a blocked
// key's due backlog costs it a probe per row (30,000 buffers for 10,000
// rows), once per settled claim or written outcome, not per cooldown.
func TestOrderedClaimPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100,000 rows per case")
	}
	t.Parallel()
	for _, c := range orderedBacklogs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t, testdb.KeyOrder)
			ctx := context.Background()
			for _, q := range orderedHistory(c.rows...) {
				_, err := db.Pool.Exec(ctx, q)
				require.NoError(t, err)
			}
			s, err := New(db.Table())
			require.NoError(t, err)
			check := func(form string) func(mode string, top map[string]any) {
				return func(mode string, top map[string]any) {
					total, _, nodes, indexes := planBuffers(top)
					text, _ := json.Marshal(top)
					t.Logf("%s; %s, %s: an ordered claim of 100: %v buffers", c.name, form, mode, total)
					require.EqualValues(t, 100, top["Actual Rows"], "%s %s: %s", form, mode, text)
					require.True(t, indexes["outbox_events_order_idx"], "%s %s: %s", form, mode, text)
					require.True(t, indexes["outbox_events_dead_order_idx"], "%s %s: %s", form, mode, text)
					require.False(t, nodes["Seq Scan"], "%s %s: %s", form, mode, text)
					require.Less(t, total, c.limit, "%s %s: %s", form, mode, text)
				}
			}
			nextDue := func(form string) func(mode string, top map[string]any) {
				return func(mode string, top map[string]any) {
					total, _, nodes, _ := planBuffers(top)
					text, _ := json.Marshal(top)
					t.Logf("%s; %s, %s: the next head due: %v buffers", c.name, form, mode, total)
					require.False(t, nodes["Seq Scan"], "%s %s: %s", form, mode, text)
					require.Less(t, total, 4*c.limit, "%s %s: %s", form, mode, text)
				}
			}
			for _, sc := range []scope{{}, {byType: true}} {
				name := map[bool]string{false: "", true: " by type"}[sc.byType]
				explainPrepared(t, db, true, s.ordered.forms(true, sc.byType).none, "int, uuid, text, bigint",
					"100, gen_random_uuid(), 'w', 60000000", check("every type"+name))
				explainPrepared(t, db, true, s.orderedTyped.forms(true, sc.byType).none, "int, uuid, text, bigint, text[]",
					"100, gen_random_uuid(), 'w', 60000000, '{a,b}'", check("typed"+name))
				explainPrepared(t, db, false, orderedNextDueSQL(s.names.Qualified, s.names.Dead, false, sc, true), "int", "0", nextDue("every type"+name))
				explainPrepared(t, db, false, orderedNextDueSQL(s.names.Qualified, s.names.Dead, true, sc, true), "text[]", "'{a,b}'", nextDue("typed"+name))
			}
			explainPrepared(t, db, false, s.sql.claims.none, "int, uuid, text, bigint, uuid[], bool",
				"100, gen_random_uuid(), 'w', 60000000, '{}', false", func(mode string, top map[string]any) {
					total, _, _, _ := planBuffers(top)
					t.Logf("%s; %s: the unordered claim of 100, for comparison: %v buffers", c.name, mode, total)
				})
		})
	}
}

// By type, the head of (key, type) is found by a probe of the order
// index that also filters on the type: it reads the key's entries of
// other types before it on its way (the index has no type). The claim
// of 100 rows of type b stays index-served behind 10,000 rows of type a
// of the same key held by a PROCESSING head, and costs about the heap
// pages of those rows more (logged; docs/ordering.md gives the figure).
func TestOrderedClaimByTypePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100,000 rows")
	}
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ctx := context.Background()
	for _, q := range orderedHistory(
		`INSERT INTO outbox_events (id, event_type, partition_key, status, lock_token, lease_until)
			VALUES (gen_random_uuid(), 'a', 'k', 'PROCESSING', gen_random_uuid(), now() + interval '1 hour')`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'a', 'k', now() - interval '2 hours' + i * interval '1 ms'
			FROM generate_series(1, 10000) AS i`,
		`INSERT INTO outbox_events (id, event_type, partition_key, next_attempt_at)
			SELECT gen_random_uuid(), 'b', 'k', now() - interval '1 hour' + i * interval '1 ms'
			FROM generate_series(1, 100) AS i`,
	) {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	s, err := New(db.Table())
	require.NoError(t, err)
	check := func(form string) func(mode string, top map[string]any) {
		return func(mode string, top map[string]any) {
			total, _, nodes, indexes := planBuffers(top)
			text, _ := json.Marshal(top)
			t.Logf("%s, %s: an ordered claim by type of 100 rows of b behind 10,000 of a: %v buffers", form, mode, total)
			require.EqualValues(t, 100, top["Actual Rows"], "%s %s: %s", form, mode, text)
			require.True(t, indexes["outbox_events_order_idx"], "%s %s: %s", form, mode, text)
			require.False(t, nodes["Seq Scan"], "%s %s: %s", form, mode, text)
			require.Less(t, total, 50000.0, "%s %s: %s", form, mode, text)
		}
	}
	explainPrepared(t, db, true, s.ordered.forms(true, true).none, "int, uuid, text, bigint",
		"100, gen_random_uuid(), 'w', 60000000", check("every type"))
	explainPrepared(t, db, true, s.orderedTyped.forms(true, true).none, "int, uuid, text, bigint, text[]",
		"100, gen_random_uuid(), 'w', 60000000, '{a,b}'", check("typed"))
	explainPrepared(t, db, true, s.orderedTyped.forms(true, true).none, "int, uuid, text, bigint, text[]",
		"100, gen_random_uuid(), 'w', 60000000, '{b}'", check("typed b only"))
	many := make([]string, 200)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	many[0] = "b"
	explainPrepared(t, db, true, s.orderedTyped.forms(true, true).none, "int, uuid, text, bigint, text[]",
		"100, gen_random_uuid(), 'w', 60000000, '{"+strings.Join(many, ",")+"}'", check("typed b among 200 types"))
}
