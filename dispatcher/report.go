package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/loglimit"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// reporter counts what happens and tells the user: the Stats counters,
// the log (rate-limited for repeats), OnError and OnOutcome. Every
// service of the dispatcher reports through it. Its methods call the
// user's hooks, so none may be called with heldSet.mu (or any other lock
// of the dispatcher) held.
type reporter struct {
	stats     counters
	logLimit  loglimit.Limiter
	logger    *slog.Logger
	onError   func(error)
	onOutcome func(context.Context, Outcome)
	table     string
	owner     string
	now       func() time.Time // the log limiter's clock

	*instruments // metrics and spans (metrics.go, trace.go)
}

func newReporter(cfg Config) *reporter {
	r := &reporter{
		logger: cfg.Logger, onError: cfg.OnError, onOutcome: cfg.OnOutcome,
		table: cfg.Table.String(), owner: cfg.Owner, now: time.Now,
	}
	r.instruments = newInstruments(cfg, r)
	return r
}

// reportError counts err and passes it to OnError and, at a bounded rate
// for repeats of the same message and error text, to the log at WARN.
func (r *reporter) reportError(msg string, err error) {
	r.stats.errors.Add(1)
	r.logLimited(slog.LevelWarn, msg+"\x00"+err.Error(), "pgoutbox: "+msg, []any{"error", err})
	if r.onError != nil {
		r.onError(err)
	}
}

// reportEventError counts and reports an error about one event: to
// OnError each time, to the log at WARN at a bounded rate for all events
// of one msg (an expired lease often takes a whole batch with it), each
// line naming the event it saw.
func (r *reporter) reportEventError(msg string, id uuid.UUID, err error) {
	r.stats.errors.Add(1)
	r.logLimited(slog.LevelWarn, msg, "pgoutbox: "+msg, nil, "event_id", id.String(), "error", err)
	if r.onError != nil {
		r.onError(err)
	}
}

// reportUnknown counts and reports an outcome that may or may not have
// been recorded: an earlier write of it may have taken effect, and why
// that cannot be known.
func (r *reporter) reportUnknown(id uuid.UUID, why string) {
	r.stats.outcomeUnknown.Add(1)
	r.reportEventError("outcome unknown; the event may run again", id,
		fmt.Errorf("%w: event %s: %s", outbox.ErrOutcomeUnknown, id, why))
}

// reportLost counts and reports an outcome that could not be recorded:
// the lease ran out first (a handler slower than LeaseDuration, a paused
// process, renewals that did not get through), so the event runs again.
func (r *reporter) reportLost(id uuid.UUID) {
	r.stats.lockLost.Add(1)
	r.reportEventError("lease lost; the outcome was not recorded and the event will run again", id,
		fmt.Errorf("%w: event %s", outbox.ErrLockLost, id))
}

// reportGivenUp logs, at ERROR, an event whose outcome the completer gave
// up writing, and reports it to OnError: matching outbox.ErrOutcomeRefused
// when the database kept refusing it, outbox.ErrOutcomeUnknown when an
// earlier write of it may have taken effect, else outbox.ErrLockLost (the
// row was not changed). Its lease expires and recovery returns it to
// PENDING.
func (r *reporter) reportGivenUp(it *item, err error) {
	cause := outbox.ErrLockLost
	switch {
	case it.refusals() >= maxRefusals:
		cause = outbox.ErrOutcomeRefused
	case it.maybeWritten:
		cause = outbox.ErrOutcomeUnknown
		r.stats.outcomeUnknown.Add(1)
	default:
		r.stats.lockLost.Add(1)
	}
	r.stats.errors.Add(1)
	r.logger.Error("pgoutbox: gave up writing an outcome; the event's lease will expire and be recovered",
		"table", r.table, "owner", r.owner, "event_id", it.event.ID.String(),
		"event_type", it.event.Type, "tries", it.tries(), "refusals", it.refusals(), "error", err)
	if r.onError != nil {
		r.onError(errtext.WrapAs(cause, err, "event %s", it.event.ID))
	}
}

// reportOutcomes counts the outcomes of a completion and passes them to
// OnOutcome under ctx.
func (r *reporter) reportOutcomes(ctx context.Context, byID map[uuid.UUID]*item, res lease.CompleteResult) {
	hook := r.onOutcome
	for _, id := range res.Sent {
		r.stats.sent.Add(1)
		r.metrics.completed(byID[id], outbox.StatusSent)
		if hook != nil {
			hook(ctx, outcomeOf(byID[id], outbox.StatusSent))
		}
	}
	for _, ret := range res.Retried {
		it := byID[ret.ID]
		o := outcomeOf(it, outbox.StatusPending)
		o.NextAttemptAt = ret.NextAttemptAt
		if it.result.snooze {
			r.stats.snoozed.Add(1)
		} else {
			r.stats.retried.Add(1)
		}
		r.logRetry(o, it.result.snooze)
		r.metrics.completed(it, outbox.StatusPending)
		if hook != nil {
			hook(ctx, o)
		}
	}
	for _, f := range res.Failed {
		r.stats.failed.Add(1)
		r.reportFailed(ctx, outcomeOf(byID[f.ID], outbox.StatusFailed))
	}
}

// reportFailed logs an event that became FAILED (the dead letter) at WARN
// and passes it to OnOutcome under ctx. Every one is logged: unlike a
// repeated error of the dispatcher's own, each names an event that needs
// someone's attention.
func (r *reporter) reportFailed(ctx context.Context, o Outcome) {
	r.metrics.failedOne(o)
	r.logger.Warn("pgoutbox: event failed; it stays FAILED until replayed", "table", r.table, "owner", r.owner,
		"event_id", o.Event.ID.String(), "event_type", o.Event.Type, "code", string(o.Code),
		"attempt", o.Event.Attempt, "error", errorText(o.Err))
	if r.onOutcome != nil {
		r.onOutcome(ctx, o)
	}
}

// logRetry logs an event that failed and will be retried at INFO (a
// snooze at DEBUG), at a bounded rate for each event type and code: one
// line per loglimit.Interval, naming the event it saw, then a count of
// those not logged.
func (r *reporter) logRetry(o Outcome, snooze bool) {
	level, msg := slog.LevelInfo, "pgoutbox: event failed; it will be retried"
	if snooze {
		level, msg = slog.LevelDebug, "pgoutbox: event snoozed"
	}
	group := []any{"event_type", o.Event.Type, "code", string(o.Code)}
	r.logLimited(level, msg+"\x00"+o.Event.Type+"\x00"+string(o.Code), msg, group,
		"event_id", o.Event.ID.String(), "attempt", o.Event.Attempt, "next_attempt_at", o.NextAttemptAt, "error", errorText(o.Err))
}

// errorText is what a log line says of a handler's or publisher's error:
// the bounded text the row stores as last_error (a handler's error may be
// of any length), or nil for no error.
func errorText(err error) any {
	if err == nil {
		return nil
	}
	return lease.CleanMessage(err.Error())
}

// logLimited logs msg at level with the table, owner and group attributes
// and the line's own (detail) at most once per loglimit.Interval for one
// key; a line logged after repeats were held back counts them
// (repeats_not_logged), and flushRepeats logs the count of those held
// back when no line followed them.
func (r *reporter) logLimited(level slog.Level, key, msg string, group []any, detail ...any) {
	if args, ok := r.limit(level, key, msg, group); ok {
		r.logger.Log(context.Background(), level, msg, append(args, detail...)...)
	}
}

// limit reports whether the line with key may be logged now (see
// logLimited) and, if so, its attributes so far: the table, owner and
// group attributes and the count of repeats held back before it.
func (r *reporter) limit(level slog.Level, key, msg string, group []any) ([]any, bool) {
	if !r.logger.Enabled(context.Background(), level) {
		return nil, false
	}
	args := append([]any{"table", r.table, "owner", r.owner}, group...)
	now := r.now()
	r.summarise(r.logLimit.Evict(now))
	suppressed, ok := r.logLimit.Allow(key, now, loglimit.Held{Level: level, Msg: msg, Args: args})
	if ok && suppressed > 0 {
		args = append(args, "repeats_not_logged", suppressed)
	}
	return args, ok
}

// flushRepeats logs, for each line whose repeats were held back and that
// has not recurred for a whole loglimit.Interval, one summary: "similar
// lines suppressed" with the line's message, group attributes and count.
// The coordinator calls it every poll, so no count waits for a repeat
// that may never come; a line that keeps recurring is not summarised: its
// next logged line carries the count (repeats_not_logged).
func (r *reporter) flushRepeats() {
	r.summarise(r.logLimit.Due(r.now(), false))
}

// flushAllRepeats summarises every count of held-back repeats, however
// recent. Run calls it when it ends: no line follows.
func (r *reporter) flushAllRepeats() {
	r.summarise(r.logLimit.Due(r.now(), true))
}

// summarise logs one "similar lines suppressed" line for each of held.
func (r *reporter) summarise(held []loglimit.Held) {
	for _, h := range held {
		args := append([]any{"message", h.Msg}, h.Args...)
		r.logger.Log(context.Background(), h.Level, "pgoutbox: similar lines suppressed",
			append(args, "repeats_not_logged", h.Suppressed)...)
	}
}

// logPanic logs, at ERROR, a panic of a handler (of eventType) or of the
// publisher that was recovered, with the stack of the goroutine that
// panicked: the event's outcome and hooks carry the panic's value but not
// where it happened. One line per loglimit.Interval for each of them, and
// per event type for handlers. Call it from the deferred recover.
func (r *reporter) logPanic(who, eventType string, id uuid.UUID, err error) {
	group := []any{"panicked", who}
	if eventType != "" {
		group = append(group, "event_type", eventType)
	}
	msg := "pgoutbox: recovered a panic; the event is retried or FAILED with code panic"
	if args, ok := r.limit(slog.LevelError, "panic\x00"+who+"\x00"+eventType, msg, group); ok {
		r.logger.Error(msg, append(args, "event_id", id.String(), "error", errorText(err),
			"stack", string(debug.Stack()))...)
	}
}

// maxLoggedIDs bounds the event IDs one log line lists.
const maxLoggedIDs = 10

// reportRecovered logs, at WARN, one recovery that found expired leases:
// how many events went back to PENDING (without spending retry budget)
// and how many became FAILED with worker_lost (each also logged by
// reportFailed), with up to maxLoggedIDs of the IDs of each. An expired
// lease means a worker stopped renewing it: a crash, a kill, a long pause
// or a lost connection.
func (r *reporter) reportRecovered(res lease.RecoverResult) {
	if len(res.Pending)+len(res.Failed) == 0 {
		return
	}
	failed := make([]uuid.UUID, len(res.Failed))
	for i, e := range res.Failed {
		failed[i] = e.ID
	}
	r.logger.Warn("pgoutbox: recovered expired leases; the workers that held them stopped renewing them (crash, kill, pause or lost connection)",
		"table", r.table, "owner", r.owner,
		"pending", len(res.Pending), "pending_ids", idList(res.Pending),
		"failed_worker_lost", len(res.Failed), "failed_ids", idList(failed))
}

// idList is up to maxLoggedIDs of ids as text, with "…" when there are
// more.
func idList(ids []uuid.UUID) []string {
	out := make([]string, 0, min(len(ids), maxLoggedIDs)+1)
	for i, id := range ids {
		if i == maxLoggedIDs {
			out = append(out, "…")
			break
		}
		out = append(out, id.String())
	}
	return out
}
