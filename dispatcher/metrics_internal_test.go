package dispatcher

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

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
	d, err := New(db.NewPool(t, 2), Config{Table: db.Table(), MeterProvider: mp, BacklogSampleInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s, unregister := d.observeBacklog()
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
func runSampler(t *testing.T, s *backlogSampler) {
	quit, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(quit); close(done) }()
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
	pool := silentPool(t)
	mp := &telemetrytest.MeterProvider{}
	d, err := New(pool, Config{MeterProvider: mp, OnError: func(error) {},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s, unregister := d.observeBacklog()
	defer unregister()
	runSampler(t, s)
	for range 3 {
		start := time.Now()
		require.NoError(t, mp.Collect(context.Background()))
		require.Less(t, time.Since(start), 5*time.Second, "a collection waits for the database")
	}
	require.Empty(t, mp.Points("pgoutbox.backlog.due"))
}

// silentPool is a pool of a server that accepts connections and never
// answers.
func silentPool(t *testing.T) *pgxpool.Pool {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	pool, err := pgxpool.New(context.Background(), "postgres://x@"+ln.Addr().String()+"/x?connect_timeout=30")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// The backlog sample reads the due index only, a bounded part of it: with
// 200,000 SENT rows and 100,000 due PENDING ones, no scan of the table,
// and the count stops at BacklogLimit. (With a backlog of only a few times
// BacklogLimit the planner may read every due row through the index
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
	query := backlogQuery(names)
	var due int64
	var age float64
	require.NoError(t, db.Pool.QueryRow(ctx, query).Scan(&due, &age))
	require.Equal(t, int64(BacklogLimit), due, "counted up to the limit")
	require.GreaterOrEqual(t, age, 60.0)

	var plan []map[string]any
	require.NoError(t, db.Pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query).Scan(&plan))
	scans := tableScans(plan[0]["Plan"].(map[string]any), db.Table().Name)
	require.NotEmpty(t, scans)
	for _, n := range scans {
		raw, _ := json.Marshal(n)
		require.Contains(t, []any{"Index Scan", "Index Only Scan"}, n["Node Type"], "no scan of the table: %s", raw)
		require.Equal(t, names.Object(sqlname.SuffixDueIndex), n["Index Name"], "%s", raw)
		require.LessOrEqual(t, n["Actual Rows"].(float64), float64(BacklogLimit), "a bounded part of the index: %s", raw)
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

// A sample that fails is reported to OnError, once per asking
// collection, and observes nothing.
func TestBacklogSampleFails(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // no outbox table
	mp := &telemetrytest.MeterProvider{}
	errs := make(chan error, 10)
	d, err := New(db.NewPool(t, 1), Config{Table: db.Table(), MeterProvider: mp, BacklogSampleInterval: time.Hour,
		OnError: func(err error) { errs <- err }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s, unregister := d.observeBacklog()
	defer unregister()
	runSampler(t, s)
	require.NoError(t, mp.Collect(context.Background()))
	err = <-errs
	require.ErrorContains(t, err, "does not exist")
	require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
	require.Contains(t, err.Error(), "pgoutbox: dispatcher: backlog sample: ")
	require.NoError(t, mp.Collect(context.Background()))
	require.Empty(t, mp.Points("pgoutbox.backlog.due"))
	require.Empty(t, errs, "no new sample within the interval")
}

// BenchmarkInstrumentsNoProvider measures what the metrics and spans add
// to one event's dispatch when the application installed no provider (the
// global ones by default): the handler's span and measurements, and the
// counting of its outcome, for an event without and with a traceparent
// header (which is not read then). Compare it with
// BenchmarkDispatchInProcess's ns/event.
//
//	go test -run '^$' -bench InstrumentsNoProvider -benchmem ./dispatcher/
func BenchmarkInstrumentsNoProvider(b *testing.B) {
	d := offlineDispatcher(b, Config{})
	for _, bc := range []struct {
		name    string
		headers map[string]string
	}{{"plain", nil}, {"traceparent", map[string]string{"traceparent": testTraceparent}}} {
		b.Run(bc.name, func(b *testing.B) {
			it := begunItem(b, &outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Attempt: 1, CreatedAt: time.Now(),
				Headers: bc.headers}, false)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d.report.Metrics().Started(it.Event, it.Suspect, time.Now())
				_, span := d.report.Spans().HandlerSpan(ctx, it.Event)
				d.report.Metrics().Handled(it.Event.Type, it.StartedAt(), 0, "")
				endHandlerSpan(span, held.Result{})
				d.report.Metrics().Completed(it.Event.Type, outbox.StatusSent, false, "")
				d.report.Counters.Claimed.Add(1)
			}
		})
	}
}
