package relay

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// The recorder's hooks count and measure in the configured
// MeterProvider, with the table and group attributes; the gauges are
// observed from the last sample while Run runs.
func TestMetrics(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.sample = sample{LagEvents: 3, LagSeconds: 0.25, TickAge: 2 * time.Second, KeysParked: 1}
	mp := &telemetrytest.MeterProvider{}
	cfg := validConfig(t, fs)
	cfg.MeterProvider = mp
	cfg.sampleEvery = time.Millisecond
	r := newRelay(t, cfg)
	require.Zero(t, mp.Callbacks(), "no gauge before Run")
	require.NoError(t, r.Start(testctx.New(t)))
	testctx.Await(t, "the gauges registered", func() bool { return mp.Callbacks() == 1 })

	fs.rec.OnBatch(batchReport{From: 1, To: 2, Events: 4, Published: 3, Parked: 1, Duration: 5 * time.Millisecond})
	fs.rec.OnBatch(batchReport{From: 2, To: 3, Events: 2, Published: 2, Duration: time.Millisecond})
	fs.rec.OnTick(9)
	fs.rec.OnPublish(3, 2*time.Millisecond)
	fs.rec.OnHeadroom(1 << 30)

	table := attribute.String("pgoutbox.table", "public.events_log")
	group := attribute.String("pgoutbox.relay.group", "g1")
	require.InDelta(t, 5, mp.Sum("pgoutbox.relay.events.published", table, group), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.relay.events.parked", table, group), 0)
	require.InDelta(t, 2, mp.Sum("pgoutbox.relay.batches", table, group), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.relay.ticks", table), 0)
	require.Equal(t, []float64{4, 2}, values(mp.Points("pgoutbox.relay.batch.size", group)))
	require.Equal(t, []float64{0.005, 0.001}, values(mp.Points("pgoutbox.relay.batch.duration", group)))
	require.Equal(t, []float64{0.002}, values(mp.Points("pgoutbox.publish.duration", table)))
	require.Equal(t, r.Stats().Published, uint64(mp.Sum("pgoutbox.relay.events.published")), "the metric and Stats agree")

	testctx.Await(t, "a lag sample", func() bool { return !r.Health().SampledAt.IsZero() })
	require.NoError(t, mp.Collect(context.Background()))
	require.Equal(t, []float64{3}, values(mp.Points("pgoutbox.relay.lag.events", table, group)))
	require.Equal(t, []float64{0.25}, values(mp.Points("pgoutbox.relay.lag.seconds", group)))
	require.Equal(t, []float64{2}, values(mp.Points("pgoutbox.relay.tick.age", table)))
	require.Equal(t, []float64{1}, values(mp.Points("pgoutbox.relay.keys.parked", group)))
	require.Equal(t, []float64{1 << 30}, values(mp.Points("pgoutbox.relay.parts.headroom_xids", table)))

	require.NoError(t, stop(t, r))
	require.Zero(t, mp.Callbacks(), "unregistered when Run returned")
}

// Each batch gets a pgoutbox.relay.batch span covering its duration,
// with its ticks and size; a batch given up sets the status to error.
func TestBatchSpan(t *testing.T) {
	t.Parallel()
	tp := &telemetrytest.TracerProvider{}
	cfg := validConfig(t, newFakes()).withDefaults()
	cfg.TracerProvider = tp
	rec := newRecorder(cfg, clock.Real())
	rec.OnBatch(batchReport{From: 4, To: 6, Events: 12, Parked: 1, Duration: time.Second})
	rec.OnBatch(batchReport{From: 6, To: 7, Events: 3, Err: errBoom})
	spans := tp.Named("pgoutbox.relay.batch")
	require.Len(t, spans, 2)
	require.True(t, spans[0].Ended)
	require.Contains(t, spans[0].Attrs, attribute.String("pgoutbox.relay.group", "g1"))
	require.Contains(t, spans[0].Attrs, attribute.String("pgoutbox.table", "public.events_log"))
	require.Contains(t, spans[0].Attrs, attribute.Int64("pgoutbox.relay.tick.from", 4))
	require.Contains(t, spans[0].Attrs, attribute.Int64("pgoutbox.relay.tick.to", 6))
	require.Contains(t, spans[0].Attrs, attribute.Int("pgoutbox.relay.batch.events", 12))
	require.Equal(t, codes.Unset, spans[0].Status)
	require.Equal(t, codes.Error, spans[1].Status)
	require.Equal(t, []error{errBoom}, spans[1].Errors)
}

func values(points []telemetrytest.Point) []float64 {
	out := make([]float64, len(points))
	for i, p := range points {
		out[i] = p.Value
	}
	return out
}

// Every error reaches OnError and is counted; the log gets one line per
// error text per loglimit.Interval, and a summary of the repeats held
// back when Run ends.
func TestErrorsLoggedAtABoundedRate(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var hooked int
	cfg := validConfig(t, newFakes())
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	cfg.OnError = func(error) { hooked++ }
	cfg = cfg.withDefaults()
	rec := newRecorder(cfg, clock.Real())
	for range 3 {
		rec.OnError(errBoom)
	}
	require.Equal(t, 3, hooked)
	require.Equal(t, uint64(3), rec.errs.Load())
	require.Equal(t, 1, strings.Count(buf.String(), "pgoutbox: relay error"))
	rec.flushRepeats(true)
	require.Contains(t, buf.String(), "similar lines suppressed")
	require.Contains(t, buf.String(), "repeats_not_logged=2")
}
