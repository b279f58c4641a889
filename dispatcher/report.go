package dispatcher

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/run"
)

// newReporter is the reporter of cfg on clk (see internal/report): every
// service of the dispatcher reports through it. Its methods call the
// user's hooks, so none may be called with heldSet.mu (or any other lock
// of the dispatcher) held.
func newReporter(cfg Config, clk clock.Clock) *report.Reporter {
	return report.New(report.Config{
		Logger: cfg.Logger, OnError: cfg.OnError, Table: cfg.Table.String(), Owner: cfg.Owner,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, PublishCode: run.PublishCode,
		Clock: clk,
	})
}

// reportFailed reports, through r, an event that became FAILED (the dead
// letter) and passes it to hook (OnOutcome) under ctx.
func reportFailed(ctx context.Context, r *report.Reporter, hook func(context.Context, Outcome), o Outcome) {
	r.Failed(&o.Event, o.Code, o.Err)
	if hook != nil {
		hook(ctx, o)
	}
}
