package emitter

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// instruments are an Emitter's metric and tracer. With no provider
// installed they are the API's no-ops.
type instruments struct {
	emitted  metric.Int64Counter
	sets     *telemetry.Sets
	tracer   telemetry.Tracer
	spanName string
	table    string
}

// newInstruments creates the instruments of cfg's providers. A counter
// the SDK refused is logged at WARN (slog.Default: an Emitter has no
// logger) and counts nothing, as the dispatcher's metrics do: New does not
// fail for it.
func newInstruments(cfg Config) instruments {
	emitted, err := cfg.MeterProvider.Meter(telemetry.Scope).Int64Counter("pgoutbox.events.emitted",
		metric.WithUnit("{event}"),
		metric.WithDescription("Events written by Emit calls that succeeded (counted before their transaction commits)"))
	table := cfg.Table.String()
	if err != nil || emitted == nil {
		slog.Default().Warn("pgoutbox: some metrics are not recorded", "table", table, "error", err)
		emitted = noop.Int64Counter{}
	}
	return instruments{
		emitted: emitted, sets: telemetry.NewSets(table), table: table,
		tracer: telemetry.NewTracer(cfg.TracerProvider), spanName: "emit " + table,
	}
}

// countEmitted counts the events of an Emit call that succeeded, by type.
// A transaction that rolls back afterwards does not take them back.
func (in *instruments) countEmitted(events []outbox.Event) {
	ctx := context.Background()
	if !in.emitted.Enabled(ctx) {
		return
	}
	for _, e := range events {
		in.emitted.Add(ctx, 1, in.sets.Of(e.Type, ""))
	}
}
