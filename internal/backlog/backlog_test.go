package backlog

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testConfig is the sampler of table through pool, observed by mp, with
// an interval of an hour and the dispatcher's default statement bound.
func testConfig(pool *pgxpool.Pool, table outbox.Table, mp *telemetrytest.MeterProvider, errorFunc func(string, error)) Config {
	return Config{Pool: pool, Table: table, Interval: time.Hour, Meter: mp.Meter(telemetry.Scope),
		Attrs: telemetry.NewSets(table.String()).Table(), OpTimeout: 15 * time.Second, Now: time.Now, ErrorFunc: errorFunc}
}

// A backlog sample counts the due PENDING events and reads how long the
// oldest has been due. A collection observes the last sample and asks for
// a new one; one within the interval reuses the sample instead of
// querying again.
func TestBacklogSample(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, next_attempt_at)
		SELECT gen_random_uuid(), 'x', now() + make_interval(secs => s) FROM unnest(ARRAY[-90, -30, -1, 600, 900]) AS s`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at, next_attempt_at)
		VALUES (gen_random_uuid(), 'x', 'SENT', now(), now() - interval '1 hour')`)
	require.NoError(t, err)
	mp := &telemetrytest.MeterProvider{}
	s, unregister := Observe(testConfig(db.NewPool(t, 2), db.Table(), mp, func(string, error) {}))
	require.NoError(t, mp.Collect(ctx))
	require.Empty(t, mp.Points("pgoutbox.backlog.due"), "no sample yet")
	runSampler(t, s)
	due := collectSample(t, mp)
	age := mp.Points("pgoutbox.backlog.oldest_due_age")
	require.InDelta(t, 3, due.Value, 0, "the due PENDING ones: not the future ones, not SENT")
	require.Len(t, age, 1)
	require.GreaterOrEqual(t, age[0].Value, 90.0)
	require.Less(t, age[0].Value, 900.0)

	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type) VALUES (gen_random_uuid(), 'x')`)
	require.NoError(t, err)
	require.NoError(t, mp.Collect(ctx))
	require.Empty(t, s.wanted, "no new sample asked for within the interval")
	points := mp.Points("pgoutbox.backlog.due")
	require.InDelta(t, 3, points[len(points)-1].Value, 0, "the sample of the interval, not a new query")
	unregister()
	require.Zero(t, mp.Callbacks())
}

// runSampler runs s until the test ends.
func runSampler(t *testing.T, s *Sampler) {
	quit, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(quit); close(done) }()
	t.Cleanup(func() { stop(); <-done })
}

// collectSample collects until the backlog gauges observe a sample, and
// returns its due point.
func collectSample(t *testing.T, mp *telemetrytest.MeterProvider) telemetrytest.Point {
	t.Helper()
	testctx.Await(t, "a backlog sample", func() bool {
		require.NoError(t, mp.Collect(context.Background()))
		return len(mp.Points("pgoutbox.backlog.due")) > 0
	})
	return mp.Points("pgoutbox.backlog.due")[0]
}

// A collection never waits for the database: against a server that
// accepts connections and never answers, it returns at once, with no
// sample, while the sampler's query waits.
func TestBacklogScrapeNeverWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	pool := testdb.SilentPool(t)
	mp := &telemetrytest.MeterProvider{}
	cfg := testConfig(pool, outbox.Table{}.WithDefaults(), mp, func(string, error) {})
	cfg.Interval = 30 * time.Second // the dispatcher's default
	s, unregister := Observe(cfg)
	defer unregister()
	runSampler(t, s)
	for range 3 {
		start := time.Now()
		require.NoError(t, mp.Collect(context.Background()))
		require.Less(t, time.Since(start), 5*time.Second, "a collection waits for the database")
	}
	require.Empty(t, mp.Points("pgoutbox.backlog.due"))
}

// The backlog sample reads the due index only, a bounded part of it: with
// 200,000 SENT rows and 100,000 due PENDING ones, no scan of the table,
// and the count stops at Limit. (With a backlog of only a few times
// Limit the planner may read every due row through the index
// instead, which is then no more work.)
func TestBacklogSamplePlan(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at)
		SELECT gen_random_uuid(), 'x', 'SENT', now() FROM generate_series(1, 200000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, next_attempt_at)
		SELECT gen_random_uuid(), 'x', now() - interval '1 minute' FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	query := Query(names)
	var due int64
	var age float64
	require.NoError(t, db.Pool.QueryRow(ctx, query).Scan(&due, &age))
	require.Equal(t, int64(Limit), due, "counted up to the limit")
	require.GreaterOrEqual(t, age, 60.0)

	var plan []map[string]any
	require.NoError(t, db.Pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query).Scan(&plan))
	scans := tableScans(plan[0]["Plan"].(map[string]any), db.Table().Name)
	require.NotEmpty(t, scans)
	for _, n := range scans {
		raw, _ := json.Marshal(n)
		require.Contains(t, []any{"Index Scan", "Index Only Scan"}, n["Node Type"], "no scan of the table: %s", raw)
		require.Equal(t, names.Object(sqlname.SuffixDueIndex), n["Index Name"], "%s", raw)
		require.LessOrEqual(t, n["Actual Rows"].(float64), float64(Limit), "a bounded part of the index: %s", raw)
	}
}

// tableScans returns the plan nodes that read the relation.
func tableScans(node map[string]any, relation string) []map[string]any {
	var out []map[string]any
	if node["Relation Name"] == relation {
		out = append(out, node)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if m, ok := c.(map[string]any); ok {
			out = append(out, tableScans(m, relation)...)
		}
	}
	return out
}

// A sample that fails is reported to ErrorFunc (the dispatcher's OnError), once per asking
// collection, and observes nothing.
func TestBacklogSampleFails(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // no outbox table
	mp := &telemetrytest.MeterProvider{}
	errs := make(chan error, 10)
	s, unregister := Observe(testConfig(db.NewPool(t, 1), db.Table(), mp, func(_ string, err error) { errs <- err }))
	defer unregister()
	runSampler(t, s)
	require.NoError(t, mp.Collect(context.Background()))
	err := <-errs
	require.ErrorContains(t, err, "does not exist")
	require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
	require.Contains(t, err.Error(), "pgoutbox: dispatcher: backlog sample: ")
	require.NoError(t, mp.Collect(context.Background()))
	require.Empty(t, mp.Points("pgoutbox.backlog.due"))
	require.Empty(t, errs, "no new sample within the interval")
}
