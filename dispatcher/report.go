package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// reporter counts what happens and tells the user: the Stats counters,
// the log (rate-limited for repeats), OnError and OnOutcome. Every
// service of the dispatcher reports through it. Its methods call the
// user's hooks, so none may be called with heldSet.mu (or any other lock
// of the dispatcher) held.
type reporter struct {
	stats     counters
	logLimit  logLimiter
	logger    *slog.Logger
	onError   func(error)
	onOutcome func(context.Context, Outcome)
	table     string
	owner     string

	*instruments // metrics and spans (metrics.go, trace.go)
}

func newReporter(cfg Config) *reporter {
	r := &reporter{
		logger: cfg.Logger, onError: cfg.OnError, onOutcome: cfg.OnOutcome,
		table: cfg.Table.String(), owner: cfg.Owner,
	}
	r.instruments = newInstruments(cfg, r)
	return r
}

// reportError counts err and passes it to OnError and, at a bounded rate
// for repeats of the same message and error text, to the log.
func (r *reporter) reportError(msg string, err error) {
	r.stats.errors.Add(1)
	if suppressed, ok := r.logLimit.allow(msg+"\x00"+err.Error(), time.Now()); ok {
		args := []any{"table", r.table, "owner", r.owner, "error", err}
		if suppressed > 0 {
			args = append(args, "repeats_not_logged", suppressed)
		}
		r.logger.Warn("pgoutbox: "+msg, args...)
	}
	if r.onError != nil {
		r.onError(err)
	}
}

// reportUnknown counts and reports an outcome that may or may not have
// been recorded: an earlier write of it may have taken effect, and why
// that cannot be known.
func (r *reporter) reportUnknown(id uuid.UUID, why string) {
	r.stats.outcomeUnknown.Add(1)
	r.reportError("outcome unknown", fmt.Errorf("event %s: %w: %s", id, outbox.ErrOutcomeUnknown, why))
}

// reportLost counts and reports an outcome that could not be recorded.
func (r *reporter) reportLost(id uuid.UUID) {
	r.stats.lockLost.Add(1)
	r.reportError("outcome not recorded", fmt.Errorf("event %s: %w", id, outbox.ErrLockLost))
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
	case it.refusals >= maxRefusals:
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
		"event_type", it.event.Type, "tries", it.tries, "refusals", it.refusals, "error", err)
	if r.onError != nil {
		r.onError(fmt.Errorf("event %s: %w: %w", it.event.ID, cause, err))
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
		if it.result.snooze {
			r.stats.snoozed.Add(1)
		} else {
			r.stats.retried.Add(1)
		}
		r.metrics.completed(it, outbox.StatusPending)
		if hook != nil {
			o := outcomeOf(it, outbox.StatusPending)
			o.NextAttemptAt = ret.NextAttemptAt
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
		"attempt", o.Event.Attempt, "error", o.Err)
	if r.onOutcome != nil {
		r.onOutcome(ctx, o)
	}
}

// repeatLogInterval is the least time between two log lines of one
// repeated error.
const repeatLogInterval = 10 * time.Second

// logLimiter lets each distinct line through at most once per
// repeatLogInterval, counting the repeats it held back.
type logLimiter struct {
	mu    sync.Mutex
	lines map[string]*limitedLine
}

type limitedLine struct {
	logged     time.Time
	suppressed int
}

// allow reports whether the line with this key may be logged at now, and
// how many repeats were held back since it was last logged.
func (l *logLimiter) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines == nil {
		l.lines = map[string]*limitedLine{}
	}
	if len(l.lines) > 1000 { // bounded memory: forget the lines not held back
		for k, line := range l.lines {
			if now.Sub(line.logged) >= repeatLogInterval {
				delete(l.lines, k)
			}
		}
		if len(l.lines) > 1000 {
			clear(l.lines)
		}
	}
	line := l.lines[key]
	if line == nil {
		l.lines[key] = &limitedLine{logged: now}
		return 0, true
	}
	if now.Sub(line.logged) < repeatLogInterval {
		line.suppressed++
		return 0, false
	}
	suppressed, line.suppressed, line.logged = line.suppressed, 0, now
	return suppressed, true
}
