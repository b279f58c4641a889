package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// publishPub makes cfg publish the events of type "pub" to "topic",
// through a recordingPublisher, and no other.
func publishPub(cfg *dispatcher.Config) {
	cfg.Publisher = &recordingPublisher{}
	cfg.RouteFunc = func(e outbox.Event) string {
		if e.Type == "pub" {
			return "topic"
		}
		return ""
	}
}

func eventType(t string) attribute.KeyValue { return attribute.String("pgoutbox.event.type", t) }
func errorType(c outbox.Code) attribute.KeyValue {
	return attribute.String("error.type", string(c))
}

// Every outcome the dispatcher records is counted in the configured
// MeterProvider, by event type and, for failures, by code; each handler
// call, Publish call and first start is measured.
func TestMetricsOfOutcomes(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ok := insertEvents(t, db, "ok", 2)
	bad := insertEvents(t, db, "bad", 1)[0]
	flaky := insertEvents(t, db, "flaky", 1)[0]
	pub := insertEvents(t, db, "pub", 1)[0]
	mp := &telemetrytest.MeterProvider{}
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	cfg.MeterProvider = mp
	cfg.OnOutcome = outcomes.add
	publishPub(&cfg)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	noop := func(context.Context, outbox.Event) error { return nil }
	require.NoError(t, d.Handle("ok", noop))
	require.NoError(t, d.Handle("bad", func(context.Context, outbox.Event) error {
		return outbox.Permanent(errors.New("bad"))
	}))
	require.NoError(t, d.Handle("flaky", func(_ context.Context, e outbox.Event) error {
		if e.Attempt == 1 {
			return errors.New("once")
		}
		return nil
	}))
	runDispatcher(t, d)
	for _, id := range append(ok, bad, pub) {
		outcomes.wait(t, id, 1)
	}
	require.Equal(t, outbox.StatusSent, outcomes.wait(t, flaky, 2)[1].Status)

	table := attribute.String("pgoutbox.table", db.Table().String())
	require.InDelta(t, 6, mp.Sum("pgoutbox.events.claimed", table), 0, "5 events, one of them twice")
	require.InDelta(t, 2, mp.Sum("pgoutbox.events.sent", table, eventType("ok")), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.sent", eventType("flaky")), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.sent", eventType("pub")), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.retried", eventType("flaky"), errorType(outbox.CodeHandlerError)), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.failed", eventType("bad"), errorType(outbox.CodeHandlerError)), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.retried"), 0, "no other retry")
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.failed"), 0, "no other failure")
	require.InDelta(t, 0, mp.Sum("pgoutbox.events.lock_lost"), 0)

	require.Len(t, mp.Points("pgoutbox.handler.duration", table, eventType("ok")), 2)
	require.Len(t, mp.Points("pgoutbox.handler.duration", eventType("flaky"), errorType(outbox.CodeHandlerError)), 1)
	require.Len(t, mp.Points("pgoutbox.handler.duration", eventType("flaky")), 2)
	require.Empty(t, mp.Points("pgoutbox.handler.duration", eventType("pub")), "no handler ran for it")
	require.NotEmpty(t, mp.Points("pgoutbox.publish.duration", table))
	delays := mp.Points("pgoutbox.event.start_delay")
	require.Len(t, delays, 5, "first attempts only, the published one included")
	for _, p := range delays {
		require.GreaterOrEqual(t, p.Value, 0.0)
		require.Less(t, p.Value, 60.0, "seconds, from created_at")
	}
	require.Equal(t, d.Stats().Claimed, uint64(mp.Sum("pgoutbox.events.claimed")), "the metric and Stats agree")
}

// The backlog gauges are observed while Run runs, and their callback is
// unregistered when it returns.
func TestBacklogGaugesWhileRunning(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	mp := &telemetrytest.MeterProvider{}
	cfg := baseConfig(db)
	cfg.MeterProvider = mp
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.Zero(t, mp.Callbacks(), "nothing registered before Run")
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	waitFor(t, "the backlog, overrun and mode-conflict callbacks", func() bool { return mp.Callbacks() == 3 })
	table := attribute.String("pgoutbox.table", db.Table().String())
	waitFor(t, "a backlog sample", func() bool {
		require.NoError(t, mp.Collect(context.Background()))
		return len(mp.Points("pgoutbox.backlog.due", table)) > 0
	})
	require.Equal(t, []float64{0}, values(mp.Points("pgoutbox.backlog.due", table)))
	require.Equal(t, []float64{0}, values(mp.Points("pgoutbox.backlog.oldest_due_age", table)))

	require.NoError(t, d.Stop(testctx.New(t)))
	require.NoError(t, <-errc)
	require.Zero(t, mp.Callbacks(), "unregistered when Run returned")
}

func values(points []telemetrytest.Point) []float64 {
	out := make([]float64, len(points))
	for i, p := range points {
		out[i] = p.Value
	}
	return out
}

func TestBacklogSampleIntervalRange(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, v := range []time.Duration{time.Millisecond, 2 * time.Hour} {
		_, err := dispatcher.New(db.NewPool(t, 1), dispatcher.Config{BacklogSampleInterval: v})
		var cerr *outbox.ConfigError
		require.ErrorAs(t, err, &cerr)
		require.Equal(t, "BacklogSampleInterval", cerr.Field)
	}
}
