package dispatcher

import (
	"context"
	"sync"

	"github.com/pgoutbox/pgoutbox/internal/complete"
	"github.com/pgoutbox/pgoutbox/internal/run"
)

// newCompleter is the completer of d (see internal/complete): it writes
// under ctx (the dispatcher's own statements: never cancelled), and its
// releases take leaseWrites (the keeper's, see internal/keeper).
func newCompleter(ctx context.Context, d *Dispatcher, leaseWrites sync.Locker) *complete.Completer {
	return complete.New(complete.Config{
		Ctx: ctx, Held: d.held, Store: d.store, Pool: d.pool, Report: d.report,
		Clock: d.clock, LeaseWrites: leaseWrites, RetryScheduled: d.retryScheduled,
		SignalAllWrites: d.mode.WakeOnRetry(),
		CompletedFunc:   d.health.completed, SettledFunc: d.health.completionsSettled,
		OutcomeFunc: outcomeFunc(d.cfg.OnOutcome), OpTimeout: opTimeout(d.cfg.LeaseDuration),
		DeleteSent: d.cfg.DeleteSent, AtMostOnce: d.cfg.Delivery == AtMostOnce,
		MaxAttempts: d.cfg.MaxAttempts, Backoff: d.cfg.Backoff,
		UnroutableMinDelay: run.UnroutableMinDelay, UnroutableMaxDelay: run.UnroutableMaxDelay,
	})
}

// outcomeFunc passes the completer's outcomes to Config.OnOutcome as
// Outcomes; nil without OnOutcome.
func outcomeFunc(hook func(context.Context, Outcome)) func(context.Context, complete.Outcome) {
	if hook == nil {
		return nil
	}
	return func(ctx context.Context, c complete.Outcome) {
		o := outcomeOf(c.Item, c.Status)
		o.Code, o.Err, o.NextAttemptAt = c.Code, c.Err, c.NextAttemptAt
		hook(ctx, o)
	}
}
