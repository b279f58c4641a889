package emitter

import (
	"context"

	"go.opentelemetry.io/otel/metric"

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

func newInstruments(cfg Config) (instruments, error) {
	emitted, err := cfg.MeterProvider.Meter(telemetry.Scope).Int64Counter("pgoutbox.events.emitted",
		metric.WithUnit("{event}"),
		metric.WithDescription("Events written by Emit calls that succeeded (counted before their transaction commits)"))
	if err != nil {
		return instruments{}, &outbox.ConfigError{Field: "MeterProvider", Reason: "refused the emitted counter", Err: err}
	}
	table := cfg.Table.String()
	return instruments{
		emitted: emitted, sets: telemetry.NewSets(table), table: table,
		tracer: telemetry.NewTracer(cfg.TracerProvider), spanName: "emit " + table,
	}, nil
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
