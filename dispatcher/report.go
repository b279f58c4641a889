package dispatcher

import (
	"context"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// newReporter is the reporter of cfg on clk (see internal/report): every
// service of the dispatcher reports through it. Its methods call the
// user's hooks, so none may be called with heldSet.mu (or any other lock
// of the dispatcher) held.
func newReporter(cfg Config, clk clock.Clock) *report.Reporter {
	return report.New(report.Config{
		Logger: cfg.Logger, OnError: cfg.OnError, Table: cfg.Table.String(), Owner: cfg.Owner,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, PublishCode: publishCode,
		Clock: clk,
	})
}

// reportGivenUp reports, through r, an event whose outcome the completer
// gave up writing: matching outbox.ErrOutcomeRefused when the database
// kept refusing it, outbox.ErrOutcomeUnknown when an earlier write of it
// may have taken effect, else outbox.ErrLockLost (the row was not
// changed). Its lease expires and recovery returns it to PENDING.
func reportGivenUp(r *report.Reporter, it *held.Item, err error) {
	cause := outbox.ErrLockLost
	switch {
	case it.Refusals() >= maxRefusals:
		cause = outbox.ErrOutcomeRefused
	case it.MaybeWritten():
		cause = outbox.ErrOutcomeUnknown
	}
	r.GivenUp(it.Event, it.Tries(), it.Refusals(), cause, err)
}

// reportOutcomes counts the outcomes of a completion and passes them to
// hook (OnOutcome) under ctx.
func reportOutcomes(ctx context.Context, r *report.Reporter, hook func(context.Context, Outcome),
	byID map[uuid.UUID]*held.Item, res lease.CompleteResult) {
	for _, id := range res.Sent {
		r.Counters.Sent.Add(1)
		it := byID[id]
		r.Metrics().Completed(it.Event.Type, outbox.StatusSent, it.Result().Snooze, it.Result().Code)
		if hook != nil {
			hook(ctx, outcomeOf(it, outbox.StatusSent))
		}
	}
	for _, ret := range res.Retried {
		it := byID[ret.ID]
		o := outcomeOf(it, outbox.StatusPending)
		o.NextAttemptAt = ret.NextAttemptAt
		if it.Result().Snooze {
			r.Counters.Snoozed.Add(1)
		} else {
			r.Counters.Retried.Add(1)
		}
		r.Retry(&o.Event, o.Code, o.NextAttemptAt, o.Err, it.Result().Snooze)
		r.Metrics().Completed(it.Event.Type, outbox.StatusPending, it.Result().Snooze, it.Result().Code)
		if hook != nil {
			hook(ctx, o)
		}
	}
	for _, f := range res.Failed {
		r.Counters.Failed.Add(1)
		reportFailed(ctx, r, hook, outcomeOf(byID[f.ID], outbox.StatusFailed))
	}
}

// reportFailed reports, through r, an event that became FAILED (the dead
// letter) and passes it to hook (OnOutcome) under ctx.
func reportFailed(ctx context.Context, r *report.Reporter, hook func(context.Context, Outcome), o Outcome) {
	r.Failed(&o.Event, o.Code, o.Err)
	if hook != nil {
		hook(ctx, o)
	}
}
