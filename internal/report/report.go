package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/loglimit"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config is what a Reporter reports to, and its clock.
type Config struct {
	// Logger receives the log lines. Required.
	Logger *slog.Logger
	// OnError receives every error reported; nil for none.
	OnError func(error)
	// Table is the outbox table's name, as every log line and metric
	// names it.
	Table string
	// Owner is the dispatcher's owner, as every log line names it.
	Owner string
	// MeterProvider receives the metrics. Required.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the spans. Required.
	TracerProvider trace.TracerProvider
	// PublishCode is the code a failed publish records, which its span's
	// status carries. Required.
	PublishCode func(error) outbox.Code
	// Clock is the log limiter's and the measurements' clock; they read
	// its Mono (real time, which a test's replaced Now does not freeze).
	// The zero Clock is the wall clock.
	Clock clock.Clock
}

// Reporter counts what happens and tells the user: the Stats counters,
// the log (rate-limited for repeats), OnError, and the metrics and spans.
// Every service of the dispatcher reports through it. Its methods call the
// user's hooks, so none may be called with a lock of the dispatcher held.
type Reporter struct {
	// Counters are the live values behind the dispatcher's Stats.
	Counters Counters
	logLimit loglimit.Limiter
	logger   *slog.Logger
	onError  func(error)
	table    string
	owner    string
	clock    clock.Clock // the log limiter's clock (its Mono)
	metrics  *Metrics
	spans    Spans
}

// New returns the Reporter of cfg. A metric an SDK refused is logged; it
// measures nothing.
func New(cfg Config) *Reporter {
	r := &Reporter{
		logger: cfg.Logger, onError: cfg.OnError,
		table: cfg.Table, owner: cfg.Owner, clock: cfg.Clock,
	}
	m, err := newMetrics(cfg, &r.Counters)
	if err != nil {
		r.logger.Warn("pgoutbox: some metrics are not recorded", "table", r.table, "error", err)
	}
	r.metrics, r.spans = m, NewSpans(cfg.TracerProvider, cfg.PublishCode)
	return r
}

// Metrics returns the metrics the Reporter measures with.
func (r *Reporter) Metrics() *Metrics { return r.metrics }

// Spans returns the spans the Reporter starts.
func (r *Reporter) Spans() Spans { return r.spans }

// Error counts err and passes it to OnError and, at a bounded rate
// for repeats of the same message and error text, to the log at WARN.
func (r *Reporter) Error(msg string, err error) {
	r.Counters.Errors.Add(1)
	r.logLimited(slog.LevelWarn, msg+"\x00"+err.Error(), "pgoutbox: "+msg, []any{"error", err})
	if r.onError != nil {
		r.onError(err)
	}
}

// EventError counts and reports an error about one event: to
// OnError each time, to the log at WARN at a bounded rate for all events
// of one msg (an expired lease often takes a whole batch with it), each
// line naming the event it saw.
func (r *Reporter) EventError(msg string, id uuid.UUID, err error) {
	r.Counters.Errors.Add(1)
	r.logLimited(slog.LevelWarn, msg, "pgoutbox: "+msg, nil, "event_id", id.String(), "error", err)
	if r.onError != nil {
		r.onError(err)
	}
}

// Unknown counts and reports an outcome that may or may not have
// been recorded: an earlier write of it may have taken effect, and why
// that cannot be known.
func (r *Reporter) Unknown(id uuid.UUID, why string) {
	r.Counters.OutcomeUnknown.Add(1)
	r.EventError("outcome unknown; the event may run again", id,
		fmt.Errorf("%w: event %s: %s", outbox.ErrOutcomeUnknown, id, why))
}

// Lost counts and reports an outcome that could not be recorded:
// the lease ran out first (a handler slower than LeaseDuration, a paused
// process, renewals that did not get through), so the event runs again.
func (r *Reporter) Lost(id uuid.UUID) {
	r.Counters.LockLost.Add(1)
	r.EventError("lease lost; the outcome was not recorded and the event will run again", id,
		fmt.Errorf("%w: event %s", outbox.ErrLockLost, id))
}

// GivenUp logs, at ERROR, an event whose outcome the completer gave
// up writing after tries writes (refusals of them refused by the
// database), and reports it to OnError as matching cause:
// outbox.ErrOutcomeRefused when the database kept refusing it,
// outbox.ErrOutcomeUnknown when an earlier write of it may have taken
// effect, else outbox.ErrLockLost (the row was not changed). Its lease
// expires and recovery returns it to PENDING.
func (r *Reporter) GivenUp(e *outbox.Event, tries, refusals int, cause, err error) {
	switch {
	case errors.Is(cause, outbox.ErrOutcomeUnknown):
		r.Counters.OutcomeUnknown.Add(1)
	case errors.Is(cause, outbox.ErrLockLost):
		r.Counters.LockLost.Add(1)
	}
	r.Counters.Errors.Add(1)
	r.logger.Error("pgoutbox: gave up writing an outcome; the event's lease will expire and be recovered",
		"table", r.table, "owner", r.owner, "event_id", e.ID.String(),
		"event_type", e.Type, "tries", tries, "refusals", refusals, "error", err)
	if r.onError != nil {
		r.onError(errtext.WrapAs(cause, err, "event %s", e.ID))
	}
}

// Refused counts, logs at ERROR and passes to OnError (as reported) an
// event whose outcome (refused, as the log names it) the database refused
// refusals times, recorded FAILED with code outcome_refused instead.
func (r *Reporter) Refused(e *outbox.Event, refused string, refusals int, err, reported error) {
	r.Counters.Failed.Add(1)
	r.Counters.Errors.Add(1)
	r.metrics.FailedOne(e.Type, outbox.CodeOutcomeRefused)
	r.logger.Error("pgoutbox: the database kept refusing an outcome; recorded FAILED with code outcome_refused instead",
		"table", r.table, "owner", r.owner, "event_id", e.ID.String(), "event_type", e.Type,
		"refused", refused, "refusals", refusals, "error", err)
	if r.onError != nil {
		r.onError(reported)
	}
}

// Failed measures and logs an event that became FAILED (the dead letter)
// with code and err at WARN. Every one is logged: unlike a repeated error
// of the dispatcher's own, each names an event that needs someone's
// attention. The caller passes it to OnOutcome.
func (r *Reporter) Failed(e *outbox.Event, code outbox.Code, err error) {
	r.metrics.FailedOne(e.Type, code)
	r.logger.Warn("pgoutbox: event failed; it stays FAILED until replayed", "table", r.table, "owner", r.owner,
		"event_id", e.ID.String(), "event_type", e.Type, "code", string(code),
		"attempt", e.Attempt, "error", ErrorText(err))
}

// Retry logs an event that failed with code and err and will be retried
// at next at INFO (a snooze at DEBUG), at a bounded rate for each event
// type and code: one line per loglimit.Interval, naming the event it saw,
// then a count of those not logged.
func (r *Reporter) Retry(e *outbox.Event, code outbox.Code, next time.Time, err error, snooze bool) {
	level, msg := slog.LevelInfo, "pgoutbox: event failed; it will be retried"
	if snooze {
		level, msg = slog.LevelDebug, "pgoutbox: event snoozed"
	}
	group := []any{"event_type", e.Type, "code", string(code)}
	r.logLimited(level, msg+"\x00"+e.Type+"\x00"+string(code), msg, group,
		"event_id", e.ID.String(), "attempt", e.Attempt, "next_attempt_at", next, "error", ErrorText(err))
}

// CircuitClosed logs, at INFO, that the publisher's circuit closed
// again, open since since, at most once per loglimit.Interval with a
// count of the lines held back.
func (r *Reporter) CircuitClosed(since time.Time) {
	r.logLimited(slog.LevelInfo, "circuit closed", "pgoutbox: publisher reachable again; circuit closed", nil,
		"open_for", r.clock.Elapsed(since).Round(time.Millisecond).String())
}

// CircuitOpened counts (fromClosed: not a failed probe's reopening) and
// logs, at WARN with its cause, that the publisher's circuit opened, to
// probe again in probeIn; at most once per loglimit.Interval with a count
// of the lines held back.
func (r *Reporter) CircuitOpened(fromClosed, afterProbe bool, probeIn time.Duration, cause error) {
	if fromClosed {
		r.Counters.CircuitOpens.Add(1)
	}
	r.logLimited(slog.LevelWarn, "circuit open",
		"pgoutbox: publisher unavailable; circuit open: events go back to PENDING without spending attempts, "+
			"and publishing pauses until a probe succeeds", nil,
		"after_probe", afterProbe, "probe_in", probeIn.String(), "error", ErrorText(cause))
}

// ErrorText is what a log line says of a handler's or publisher's error:
// the bounded text the row stores as last_error (a handler's error may be
// of any length), or nil for no error.
func ErrorText(err error) any {
	if err == nil {
		return nil
	}
	return lease.CleanMessage(err.Error())
}

// logLimited logs msg at level with the table, owner and group attributes
// and the line's own (detail) at most once per loglimit.Interval for one
// key; a line logged after repeats were held back counts them
// (repeats_not_logged), and FlushRepeats logs the count of those held
// back when no line followed them.
func (r *Reporter) logLimited(level slog.Level, key, msg string, group []any, detail ...any) {
	if args, ok := r.limit(level, key, msg, group); ok {
		r.logger.Log(context.Background(), level, msg, append(args, detail...)...)
	}
}

// limit reports whether the line with key may be logged now (see
// logLimited) and, if so, its attributes so far: the table, owner and
// group attributes and the count of repeats held back before it.
func (r *Reporter) limit(level slog.Level, key, msg string, group []any) ([]any, bool) {
	if !r.logger.Enabled(context.Background(), level) {
		return nil, false
	}
	args := append([]any{"table", r.table, "owner", r.owner}, group...)
	now := r.clock.Mono()
	r.summarise(r.logLimit.Evict(now))
	suppressed, ok := r.logLimit.Allow(key, now, loglimit.Held{Level: level, Msg: msg, Args: args})
	if ok && suppressed > 0 {
		args = append(args, "repeats_not_logged", suppressed)
	}
	return args, ok
}

// FlushRepeats logs, for each line whose repeats were held back and that
// has not recurred for a whole loglimit.Interval, one summary: "similar
// lines suppressed" with the line's message, group attributes and count.
// The coordinator calls it every poll, so no count waits for a repeat
// that may never come; a line that keeps recurring is not summarised: its
// next logged line carries the count (repeats_not_logged).
func (r *Reporter) FlushRepeats() {
	r.summarise(r.logLimit.Due(r.clock.Mono(), false))
}

// FlushAllRepeats summarises every count of held-back repeats, however
// recent. Run calls it when it ends: no line follows.
func (r *Reporter) FlushAllRepeats() {
	r.summarise(r.logLimit.Due(r.clock.Mono(), true))
}

// summarise logs one "similar lines suppressed" line for each of held.
func (r *Reporter) summarise(held []loglimit.Held) {
	for _, h := range held {
		args := append([]any{"message", h.Msg}, h.Args...)
		r.logger.Log(context.Background(), h.Level, "pgoutbox: similar lines suppressed",
			append(args, "repeats_not_logged", h.Suppressed)...)
	}
}

// Panic logs, at ERROR, a panic of a handler (of eventType) or of the
// publisher that was recovered, with the stack of the goroutine that
// panicked: the event's outcome and hooks carry the panic's value but not
// where it happened. One line per loglimit.Interval for each of them, and
// per event type for handlers. Call it from the deferred recover.
func (r *Reporter) Panic(who, eventType string, id uuid.UUID, err error) {
	group := []any{"panicked", who}
	if eventType != "" {
		group = append(group, "event_type", eventType)
	}
	msg := "pgoutbox: recovered a panic; the event is retried or FAILED with code panic"
	if args, ok := r.limit(slog.LevelError, "panic\x00"+who+"\x00"+eventType, msg, group); ok {
		r.logger.Error(msg, append(args, "event_id", id.String(), "error", ErrorText(err),
			"stack", string(debug.Stack()))...)
	}
}

// MaxLoggedIDs bounds the event IDs one log line lists.
const MaxLoggedIDs = 10

// Recovered logs, at WARN, one recovery that found expired leases:
// how many events went back to PENDING (without spending retry budget)
// and how many became FAILED with worker_lost (each also logged by
// Failed), with up to MaxLoggedIDs of the IDs of each. An expired
// lease means a worker stopped renewing it: a crash, a kill, a long pause
// or a lost connection.
func (r *Reporter) Recovered(res lease.RecoverResult) {
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

// idList is up to MaxLoggedIDs of ids as text, with "…" when there are
// more.
func idList(ids []uuid.UUID) []string {
	out := make([]string, 0, min(len(ids), MaxLoggedIDs)+1)
	for i, id := range ids {
		if i == MaxLoggedIDs {
			out = append(out, "…")
			break
		}
		out = append(out, id.String())
	}
	return out
}
