package run

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testRunner returns an unordered runner of cfg (Concurrency 1 when
// unset) over a held set of its own, quiet, reporting to tr (noop when
// nil); Release lets the items go, FinalFailure says no. Start it before
// running a batch.
func testRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Report == nil {
		cfg.Report = testReporter(nil)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Held = held.NewSet(clock.Real(), time.Minute)
	cfg.Circuit = circuit.New(circuit.Config{MinBackoff: time.Second, MaxBackoff: time.Minute, ProbeSize: 1, WakeFunc: func() {}})
	cfg.Claimers, cfg.BatchSize, cfg.SuspectWait = 1, 10, time.Minute
	if cfg.Mode == nil {
		cfg.Mode = NewMode(false, cfg.Concurrency)
	}
	cfg.Release = func(items []*held.Item, _ string) { cfg.Held.Remove(items) }
	cfg.FinalFailure = func(*held.Item) bool { return false }
	return New(cfg)
}

// testReporter is a quiet reporter sending its spans to tp (noop when
// nil).
func testReporter(tp trace.TracerProvider) *report.Reporter {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return report.New(report.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnError: func(error) {},
		MeterProvider: noop.NewMeterProvider(), TracerProvider: tp, PublishCode: PublishCode,
	})
}

// heldItem is e claimed (marked started) into r's held set and begun now,
// as a handler call sees it.
func heldItem(t testing.TB, r *Runner, e outbox.Event) *held.Item {
	t.Helper()
	items, _ := r.held.Add(context.Background(), lease.Batch{Token: uuid.New(), Events: []outbox.Event{e},
		Started: []bool{true}}, time.Now(), 0)
	require.True(t, r.held.Begin(items[0], 0))
	return items[0]
}
