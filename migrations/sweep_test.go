package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// version9 creates an outbox at schema version 9 in a database of its
// own, and returns its connection, config and quoted table name.
func version9(t *testing.T) (*testdb.DB, *pgx.Conn, migrations.Config, string) {
	t.Helper()
	db, conn, cfg, table := version1(t)
	applyRendered(t, conn, cfg, append(upTo8, "009_outcome_token.up.sql")...)
	return db, conn, cfg, table
}

// rowsByID returns every row of the outbox, whatever table holds it, as
// JSON by id, with the table that holds it.
func rowsByID(t *testing.T, conn *pgx.Conn, from string) map[string][2]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT id::text, to_jsonb(o)::text, tableoid::regclass::text FROM `+from+` AS o`)
	require.NoError(t, err)
	out := map[string][2]string{}
	for rows.Next() {
		var id, row, table string
		require.NoError(t, rows.Scan(&id, &row, &table))
		out[id] = [2]string{row, table}
	}
	require.NoError(t, rows.Err())
	return out
}

// An outbox at version 8 or 9 with rows in every status (PENDING,
// PROCESSING under a live lease, SENT, FAILED, and a skipped FAILED head
// of a key) upgrades to the latest version with every row carried over
// unchanged (from version 8 with the columns it gains, NULL): PENDING
// and PROCESSING rows stay in the outbox table, FAILED rows are in the
// dead letters, SENT rows in the history's time partitions (not its
// default partition), and no stray is left.
func TestMigrateFromVersion8Or9CarriesEveryRowOver(t *testing.T) {
	t.Parallel()
	for _, from := range []int{8, 9} {
		t.Run(fmt.Sprintf("from%d", from), func(t *testing.T) {
			t.Parallel()
			carriesEveryRowOver(t, from)
		})
	}
}

// carriesEveryRowOver is TestMigrateFromVersion8Or9CarriesEveryRowOver from
// version from (8 or 9).
func carriesEveryRowOver(t *testing.T, from int) {
	ctx := context.Background()
	db, conn, cfg, table := version1(t)
	outcomeToken, outcomeTokenValue := "", ""
	applyRendered(t, conn, cfg, upTo8...)
	if from == 9 {
		applyRendered(t, conn, cfg, "009_outcome_token.up.sql")
		outcomeToken, outcomeTokenValue = ", outcome_token", ", CASE WHEN s IN ('SENT', 'FAILED') THEN gen_random_uuid() END"
	}
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, aggregate_id, partition_key, attempts, last_error_code,
	lock_token, lock_owner, locked_at, lease_until, heartbeat_at, started_at, sent_at, failed_at, skipped_at`+outcomeToken+`, headers, payload)
SELECT gen_random_uuid(), 'v9.' || s, s, 'agg-' || i, CASE WHEN i % 2 = 0 THEN 'pk' END, i, CASE WHEN s LIKE 'FAILED%' THEN 'boom' END,
	CASE WHEN s = 'PROCESSING' THEN gen_random_uuid() END, CASE WHEN s = 'PROCESSING' THEN 'owner' END,
	CASE WHEN s = 'PROCESSING' THEN now() END, CASE WHEN s = 'PROCESSING' THEN now() + interval '1 hour' END,
	CASE WHEN s = 'PROCESSING' THEN now() END, CASE WHEN s = 'PROCESSING' THEN now() END,
	CASE WHEN s = 'SENT' THEN now() - i * interval '7 hours' END, CASE WHEN s LIKE 'FAILED%' THEN now() - i * interval '1 hour' END,
	CASE WHEN s = 'FAILED_SKIPPED' THEN now() END`+outcomeTokenValue+`,
	jsonb_build_object('i', i), '\x7b7d'
FROM generate_series(1, 5) AS i, (VALUES ('PENDING'), ('PROCESSING'), ('SENT'), ('FAILED'), ('FAILED_SKIPPED')) AS v(s)
WHERE s <> 'FAILED_SKIPPED'`)
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, aggregate_id, attempts, failed_at, skipped_at, last_error_code, payload)
VALUES (gen_random_uuid(), 'v9.skipped', 'FAILED', 'agg-head', 3, now() - interval '1 hour', now(), 'boom', '\x7b7d')`)
	before := rowsByID(t, conn, table)
	require.Len(t, before, 21)

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	after := rowsByID(t, conn, table)
	for id, row := range rowsByID(t, conn, suffixed(table, "_dead")) {
		after[id] = row
	}
	sent := rowsByID(t, conn, suffixed(table, "_sent"))
	name := db.Table().Name
	for id, row := range before {
		var status struct{ Status string }
		require.NoError(t, conn.QueryRow(ctx, `SELECT $1::jsonb->>'status'`, row[0]).Scan(&status.Status))
		got, ok := after[id]
		if status.Status == "SENT" {
			got, ok = sent[id]
			require.Regexp(t, `^`+name+`_s\d{12}$`, got[1], "a SENT row in a time partition")
		}
		require.True(t, ok, "row %s lost", id)
		requireSameRow(t, row[0], got[0])
	}
	require.Len(t, sent, 5)
	requireTableCounts(t, conn, table, map[string]int{"": 10, "_dead": 6, "_sent": 5})
	var strays int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE status IN ('SENT', 'FAILED')`).Scan(&strays))
	require.Zero(t, strays)
	require.NoError(t, migrations.Migrate(ctx, conn, cfg), "a second Migrate finds nothing to do")
	requireTableCounts(t, conn, table, map[string]int{"": 10, "_dead": 6, "_sent": 5})
}

// requireSameRow checks that the row after the upgrade (JSON) is the
// row before it, but for the columns it gained, which must be NULL.
func requireSameRow(t *testing.T, before, after string) {
	t.Helper()
	var b, a map[string]any
	require.NoError(t, json.Unmarshal([]byte(before), &b))
	require.NoError(t, json.Unmarshal([]byte(after), &a))
	for k, v := range a {
		if _, ok := b[k]; !ok {
			require.Nil(t, v, "column %s gained by the upgrade", k)
			delete(a, k)
		}
	}
	require.Equal(t, b, a, "the row changed")
}

// requireTableCounts checks the rows of the outbox's tables by suffix.
func requireTableCounts(t *testing.T, conn *pgx.Conn, table string, want map[string]int) {
	t.Helper()
	for suffix, n := range want {
		var got int
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM `+suffixed(table, suffix)).Scan(&got))
		require.Equal(t, n, got, "rows in %s", suffixed(table, suffix))
	}
}

// TestMeasureSweepOfAMillionSentRows (PGOUTBOX_MEASURE=1) upgrades an
// outbox of version 9 holding 1,000,000 SENT rows (sent_at over the last
// day) and 10,000 PENDING ones: the SQL migrations 010 and 011 first,
// timed, then Migrate, which finds them applied and sweeps, timed, while
// one writer inserts events and one claimer claims them (10 at a time)
// without pause; it logs the sweep's time and the writer's and claimer's
// slowest statements during it.
//
//	PGOUTBOX_MEASURE=1 go test -count=1 -run TestMeasureSweepOfAMillionSentRows -v ./migrations/
func TestMeasureSweepOfAMillionSentRows(t *testing.T) {
	if os.Getenv("PGOUTBOX_MEASURE") == "" {
		t.Skip("set PGOUTBOX_MEASURE=1 to measure")
	}
	ctx := context.Background()
	db, conn, cfg, table := version9(t)
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, sent_at, attempts, payload)
SELECT gen_random_uuid(), 'measure', 'SENT', now() - (i % 86400) * interval '1 second', 1, repeat('x', 200)::bytea
FROM generate_series(1, 1000000) AS i`)
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, payload) SELECT gen_random_uuid(), 'measure', '\x7b7d' FROM generate_series(1, 10000)`)
	mustExec(t, conn, `VACUUM ANALYZE `+table)
	start := time.Now()
	applyRendered(t, conn, cfg, "010_lean_tables.up.sql", "011_lean_indexes.up.sql")
	t.Logf("migrations 010 and 011: %s", time.Since(start))

	pool := db.NewPool(t, 4)
	var stop atomic.Bool
	var wg sync.WaitGroup
	took := make([][]time.Duration, 2)
	for i, stmt := range []string{
		`INSERT INTO ` + table + ` (id, event_type, payload) VALUES (gen_random_uuid(), 'measure.live', '\x7b7d')`,
		`UPDATE ` + table + ` AS o SET status = 'PROCESSING', lock_token = gen_random_uuid(), locked_at = now(),
			lease_until = now() + interval '1 minute' WHERE o.id = ANY (ARRAY(SELECT id FROM ` + table + `
			WHERE status = 'PENDING' AND next_attempt_at <= now() ORDER BY next_attempt_at, seq LIMIT 10 FOR UPDATE SKIP LOCKED))`,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				_, err := pool.Exec(ctx, stmt)
				if err != nil {
					t.Error(err)
					return
				}
				took[i] = append(took[i], time.Since(t0))
			}
		}()
	}
	start = time.Now()
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	sweep := time.Since(start)
	stop.Store(true)
	wg.Wait()
	var strays, sent, inDefault int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE status IN ('SENT', 'FAILED')`).Scan(&strays))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+suffixed(table, "_sent")).Scan(&sent))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+suffixed(table, "_sent_default")).Scan(&inDefault))
	require.Zero(t, strays)
	require.Equal(t, 1000000, sent)
	require.Zero(t, inDefault)
	var load string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = string(b[:14])
	}
	t.Logf("Migrate's sweep of 1,000,000 SENT rows: %s; meanwhile inserts %s, claims of 10 %s; load %s",
		sweep, spread(took[0]), spread(took[1]), load)
}

// spread is how many statements took ds, and their median, 99th
// percentile and slowest.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%d (median %s, p99 %s, max %s)", len(ds), ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1])
}

// A fresh Migrate creates one-minute partitions of the history up to two
// minutes ahead, so that the first completions land in a time partition,
// not in the default partition, and no longer ones: a partition holds
// its range for its whole span, and a dispatcher with a short RetainSent
// (a 4-minute one: one-minute partitions) must be able to create and
// retire its own from then on.
func TestMigrateCreatesTheCurrentPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	require.NoError(t, migrations.Migrate(ctx, db.Pool, migrations.Config{Table: db.Table()}))
	sent := pgx.Identifier{db.Schema, db.Table().Name + "_sent"}.Sanitize()
	var parts int
	var longest time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), coalesce(max(
			(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''(.*)''\)'))[1]::timestamptz -
			(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''(.*)''\) TO'))[1]::timestamptz), '0')
		FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname LIKE $2`, sent, db.Table().Name+`\_s2%`).Scan(&parts, &longest))
	require.Positive(t, parts, "a time partition")
	require.Equal(t, time.Minute, longest, "one-minute partitions only")
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+sent+` (id, seq, event_type, sent_at) VALUES (gen_random_uuid(), 1, 'x', now())`)
	require.NoError(t, err)
	var inDefault int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{db.Schema, db.Table().Name + "_sent_default"}.Sanitize()).Scan(&inDefault))
	require.Zero(t, inDefault, "now has its partition")

	d, err := dispatcher.New(db.Pool, dispatcher.Config{Table: db.Table(), RetainSent: 4 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, d.Stop(ctx))
	var reach time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''(.*)''\)'))[1]::timestamptz) - now()
		FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname LIKE $2`, sent, db.Table().Name+`\_s2%`).Scan(&reach))
	require.Greater(t, reach, 3*time.Minute, "the dispatcher created its own partitions after Migrate's (which reach at most 3 minutes ahead)")
}

// When the history stays busy (here its default partition locked, which
// ATTACH needs), Migrate fails naming it, and leaves the SENT rows of
// version 9 in the outbox table rather than sweeping them into the
// default partition; the next Migrate moves them.
func TestMigrateFailsWhenTheHistoryStaysBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn, cfg, table := version9(t)
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, attempts, sent_at, payload)
		VALUES (gen_random_uuid(), 'v9', 'SENT', 1, now() - interval '40 days', '\x7b7d')`)
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, attempts, sent_at, payload)
		VALUES (gen_random_uuid(), 'v9', 'SENT', 1, now() - interval '100 days', '\x7b7d')`)

	other, err := pgx.ConnectConfig(ctx, conn.Config())
	require.NoError(t, err)
	defer func() { _ = other.Close(ctx) }()
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	mustExec(t, tx.Conn(), `LOCK TABLE `+suffixed(table, "_sent_default")+` IN ACCESS EXCLUSIVE MODE`)
	err = migrations.Migrate(ctx, conn, cfg)
	require.ErrorIs(t, err, purge.ErrBusy)
	require.ErrorContains(t, err, "busy")
	require.NoError(t, tx.Rollback(ctx))
	requireTableCounts(t, conn, table, map[string]int{"": 1, "_sent": 1})

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	requireTableCounts(t, conn, table, map[string]int{"": 0, "_sent": 2})
	var inDefault int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+suffixed(table, "_sent_default")).Scan(&inDefault))
	require.Zero(t, inDefault)
}
