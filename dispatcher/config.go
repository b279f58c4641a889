package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Delivery chooses between at-least-once and at-most-once delivery.
type Delivery int

const (
	// AtLeastOnce (the default) retries failed attempts and re-runs events
	// whose worker was lost. A handler may run more than once per event.
	AtLeastOnce Delivery = iota
	// AtMostOnce never runs an event's handler (or publishes it) twice: a
	// failed attempt becomes FAILED at once, and so does an event whose
	// lease expired while it was held. Events may be lost; none repeat.
	// A handler that returns outbox.Snooze declares that it did nothing,
	// so its event runs again after the snooze in this mode too.
	AtMostOnce
)

// String names the mode.
func (d Delivery) String() string {
	if d == AtMostOnce {
		return "at-most-once"
	}
	return "at-least-once"
}

// Wakeup chooses how LISTEN/NOTIFY wakes the dispatcher between polls.
type Wakeup int

const (
	// WakeupAuto (the default) listens for the emitter's notifications when
	// a self-probe shows that they arrive, and stays with polling alone
	// (logging once) when they do not. The probe runs beside dispatching,
	// which polls meanwhile: Start does not wait for it.
	WakeupAuto Wakeup = iota
	// WakeupRequired makes Start (and Run) fail with ErrWakeupUnavailable
	// unless the self-probe, run among the start-up checks, shows that
	// notifications arrive.
	WakeupRequired
	// WakeupDisabled polls only. Use it behind PgBouncer in transaction
	// mode, where LISTEN cannot work.
	WakeupDisabled
)

// String names the mode.
func (w Wakeup) String() string {
	switch w {
	case WakeupRequired:
		return "required"
	case WakeupDisabled:
		return "disabled"
	}
	return "auto"
}

// Config configures a Dispatcher. Every field has a default, applied by New
// to its zero value; a value out of range makes New return an
// *outbox.ConfigError naming the field. Special settings have fields of
// their own (NoHandlerTimeout, NoDrain, NoWakeupCooldown, KeepSent), never a magic
// number.
type Config struct {
	// Table is the outbox to dispatch. Defaults to public.outbox_events.
	Table outbox.Table
	// Owner names this dispatcher in lock_owner and the attempt log.
	// Defaults to "<hostname>-<pid>-<random>"; at most 200 bytes of UTF-8
	// without NUL (PostgreSQL text cannot hold anything else).
	Owner string

	// BatchSize is the most events one claim takes. Defaults to 100;
	// 1 to 10,000.
	BatchSize int
	// Concurrency is the most handler calls at once. The dispatcher holds
	// at most Concurrency + Claimers × BatchSize events (claimed and not
	// yet completed; a BatchSize more while suspects wait for their turn,
	// see docs/dispatcher.md): batches are claimed ahead while handlers run, so
	// that claiming and dispatching overlap; events waiting for a handler
	// slot keep their lease, and are released unstarted at stop. Defaults
	// to 100; 1 to 100,000.
	Concurrency int
	// Claimers is the most claims in flight at once, each on its own pool
	// connection. Two keep PostgreSQL claiming one batch while it records
	// the outcomes of another; more help only where the database has
	// cores to spare. Defaults to 2; 1 to 16. With Concurrency 1 and
	// Ordering Unordered, claims run one at a time whatever this says, so
	// that events are handed out in claim order (see Unordered).
	Claimers int
	// PollInterval is the time between poll cycles. Polling always runs:
	// it schedules retries and drains what wake-ups missed. Defaults to 1s;
	// 10ms to 1h.
	PollInterval time.Duration
	// LeaseDuration is how long a claim holds without renewal. A heartbeat
	// renews held leases about every third of it. Defaults to 30s; 1s to
	// 1h.
	LeaseDuration time.Duration
	// HandlerTimeout bounds one handler call (its context's deadline).
	// The deadline is at least HandlerTimeout after the call starts and at
	// most a 64th of it (10ms at most) later, so that handlers of one batch
	// starting together share one timer. Defaults to 1m; 1ms to 24h. Set
	// NoHandlerTimeout instead for none. A handler that ignores its
	// cancelled context and runs past it is logged at WARN and counted,
	// and its lease is no longer renewed, so that another replica delivers
	// the event (see docs/dispatcher.md, "Handlers that ignore their
	// context").
	HandlerTimeout time.Duration
	// NoHandlerTimeout gives handler calls no deadline of their own
	// (HandlerTimeout must then be zero): a handler runs until it returns,
	// the lease is lost or a stop cancels it. Defaults to false.
	NoHandlerTimeout bool
	// PublishTimeout bounds one Publisher.Publish call. Defaults to 30s;
	// 1ms to 24h.
	PublishTimeout time.Duration
	// DrainTimeout is how long a stop lets in-flight handlers finish before
	// cancelling their contexts. Defaults to 30s; at most 1h. Set NoDrain
	// instead to cancel them at once.
	DrainTimeout time.Duration
	// NoDrain makes a stop cancel in-flight handlers' contexts at once,
	// without waiting for them to finish (DrainTimeout must then be zero).
	// Defaults to false.
	NoDrain bool

	// MaxAttempts is the retry budget: attempts beyond it are not made and
	// the event becomes FAILED. Defaults to 10; 1 to 1,000.
	MaxAttempts int
	// Backoff computes the delay before each retry, added to the
	// database's now(). Defaults to outbox.DefaultBackoff.
	Backoff outbox.Backoff
	// Delivery chooses at-least-once (default) or at-most-once delivery.
	Delivery Delivery
	// Ordering chooses whether the events of one order key (see
	// outbox.OrderKey) are delivered in order. Defaults to Unordered.
	// Every dispatcher of one table must use the same Ordering: an
	// unordered one takes a key's events regardless of order. A
	// dispatcher that hears another of its table with another Ordering,
	// HeadPolicy or OrderScope logs a WARN and reports it in
	// Health.ModeConflicts. See docs/ordering.md.
	Ordering Ordering
	// HeadPolicy chooses what a FAILED event does to the later events of
	// its key under Ordering PerKey: BlockKey (the default) holds them
	// until an operator replays or skips it; SkipFailed lets them go on.
	// SkipFailed needs Ordering PerKey.
	HeadPolicy HeadPolicy
	// OrderScope chooses what the order of Ordering PerKey spans:
	// ScopeKey (the default) one order per order key across every event
	// type, ScopeKeyAndType one order per key and event type, so that a
	// failing or slow type holds only its own events of the key. Every
	// dispatcher of one table must use the same scope. ScopeKeyAndType
	// needs Ordering PerKey. See docs/ordering.md, "Order scope".
	OrderScope OrderScope
	// DeleteSent deletes events on success instead of moving them to the
	// SENT history (<table>_sent, where operators list and inspect them
	// until retention retires them; see docs/schema.md, "Whether to keep
	// the history"). Defaults to false.
	DeleteSent bool

	// SkipVerify starts the dispatcher without comparing the table's schema
	// with what this version needs (migrations.Verify): Start then checks
	// only that the table and the columns it uses exist. Set it when the
	// dispatcher's role cannot read the version table, or the schema was
	// changed on purpose. Defaults to false: a schema that does not match
	// makes Start fail, naming each object with its expected and actual
	// state.
	SkipVerify bool

	// RetainSent is how long SENT rows are kept after they became SENT
	// (sent_at, database clock) before the retention job retires them.
	// The SENT history is partitioned by time, in ranges of the longest
	// of 1m, 5m, 15m, 1h, 6h and 1d that is at most RetainSent/4 (6h for
	// 24h), and a whole partition is dropped once its range is older than
	// RetainSent: a row is kept between RetainSent and RetainSent plus
	// one range. Defaults to 24h; 1m (and at least twice LeaseDuration)
	// to 100 years. Set KeepSent instead to keep them
	// (for example with DeleteSent, or when an operator purges them). See
	// docs/operations.md, "Retention and vacuum".
	RetainSent time.Duration
	// KeepSent turns the retirement of SENT rows off (RetainSent must then
	// be zero); the retention job still creates the history's daily
	// partitions (unless DeleteSent is set too) and sweeps strays.
	// Defaults to false.
	KeepSent bool
	// RetainFailed, when set, is how long FAILED rows are kept after they
	// became FAILED (failed_at) before the retention job deletes them;
	// 1m (and at least twice LeaseDuration) to 100 years. Defaults to zero: FAILED rows are kept until an
	// operator replays or purges them.
	RetainFailed time.Duration
	// RetentionInterval is the time between retention passes. A pass
	// deletes due rows in batches until a batch comes back short; one
	// replica at a time deletes (the others skip their pass while it
	// does). The first pass starts at a random point of the first
	// interval, so that replicas started together spread out. Defaults to
	// 1m; 10ms to 24h.
	RetentionInterval time.Duration
	// RetentionBatchSize is the most rows one retention statement
	// deletes. Defaults to 5,000; 1 to 100,000.
	RetentionBatchSize int

	// Wakeup chooses how notifications wake the dispatcher. Defaults to
	// WakeupAuto.
	Wakeup Wakeup
	// The LISTEN channel is derived from Table, as the emitter's and
	// admin's notify channel is ("<schema>.<table>", or "pgoutbox_<table>"
	// past 63 bytes): it is not configurable, so that a dispatcher cannot
	// listen on a channel its emitters never notify.
	// ListenerConnConfig configures the dedicated listener connection.
	// Defaults to a copy of the pool's connection config. Point it at the
	// database directly when the pool goes through a pooler.
	ListenerConnConfig *pgx.ConnConfig
	// WakeupProbeTimeout bounds the self-probe, which sends a notification
	// on a private channel and waits for it. Defaults to 5s; 100ms to 1m.
	WakeupProbeTimeout time.Duration
	// WakeupCooldown paces the claim cycles started by wake-ups
	// (notifications and Trigger). While the dispatcher is busy (the
	// claims that ended within the last WakeupCooldown found at least half
	// a BatchSize of events: 2,500 events/s at the defaults) it is the
	// shortest time between two such cycles: wake-ups within it coalesce
	// into one cycle at its end, so that each claim takes many events.
	// Otherwise a wake-up claims at once, and wake-ups that arrive while a
	// claim is in flight cause one more claim when it ends. After a
	// wake-up, follow-up claims run every fifth of WakeupCooldown (4ms at
	// the default) until one has started WakeupCooldown after the last
	// wake-up: they find events whose Emit sent no notify (see the
	// emitter's NotifyInterval, whose default is the same 20ms). It adds
	// at most this much latency while busy, and none to a wake-up while
	// quiet. Defaults to 20ms; at most 10s. Set NoWakeupCooldown instead
	// for none.
	WakeupCooldown time.Duration
	// NoWakeupCooldown starts a claim cycle for every wake-up, with no
	// coalescing and no follow-up claims (WakeupCooldown must then be
	// zero). Defaults to false.
	NoWakeupCooldown bool
	// IdlePollInterval is the longest the poll interval stretches to while
	// wake-ups work and the table is idle: each empty poll doubles the
	// interval up to it, and any claimed event resets it. Retries and
	// delayed events still run on time, because the dispatcher also sleeps
	// until the next PENDING event's next_attempt_at at the latest.
	// Defaults to PollInterval: no stretching, so that every committed
	// event is claimed within PollInterval of its commit even when no
	// notification announced it (an emitter's NotifyInterval skips the
	// notify of Emit calls soon after one that notified, and that one may
	// roll back or commit much earlier or later). Stretch only where every
	// event's own transaction notifies (emitter NotifyEveryEmit, no other
	// writers); otherwise such an event can wait up to IdlePollInterval.
	// PollInterval to 1h.
	IdlePollInterval time.Duration

	// RecoverEvery runs recovery of expired leases every Nth poll cycle.
	// A pass keeps recovering while its statements come back full, for
	// up to half a PollInterval (the dispatcher's clock), and while
	// expired leases remain it continues at the next poll: a mass crash's
	// leases come back at the speed of the statement, not one batch per
	// RecoverEvery polls. Defaults to 10; 1 to 1,000.
	RecoverEvery int
	// RecoverBatchSize bounds the rows one recovery statement changes.
	// Defaults to 1,000; 1 to 100,000.
	RecoverBatchSize int
	// MaxRecoveries is how often one event may be recovered from a lost
	// worker before it is FAILED with worker_lost (a poison event that
	// kills its worker every time). Defaults to 3; 1 to 1,000.
	MaxRecoveries int

	// Publisher, if set, receives every event the router gives a
	// destination, after the event's local handler (if any) succeeded.
	// Without PublishTypes the dispatcher claims events of every type
	// (see ClaimedTypes): run it alone on its table, or beside
	// dispatchers of the same configuration. With PublishTypes it claims
	// those types and its handlers' types only.
	Publisher outbox.Publisher
	// PublishTypes, if set, are the event types the Publisher carries:
	// the dispatcher claims these and its handlers' types only, and
	// publishes events of these types only (RouteFunc still picks their
	// destination). Set it when several services, or several versions of
	// one during a rolling deploy, share a table, so that no dispatcher
	// claims an event it cannot deliver. Defaults to nil: every type the
	// router gives a destination is published, and every type claimed.
	// Needs a Publisher; each type non-empty, at most 255 bytes of UTF-8
	// without NUL.
	PublishTypes []string
	// CircuitMinBackoff is how long the publisher's circuit stays open
	// after a publish found the destination unavailable (every message
	// of a call failed with outbox.ErrUnavailable) before a probe may go
	// through; each failed probe doubles it, up to CircuitMaxBackoff.
	// While it is open, nothing that needs the publisher is claimed and
	// no attempt is spent (see docs/dispatcher.md, "Outages"). Defaults
	// to PollInterval; 10ms to 1h.
	CircuitMinBackoff time.Duration
	// CircuitMaxBackoff bounds the time between probes of an open
	// circuit. Defaults to 1m, or CircuitMinBackoff when longer;
	// CircuitMinBackoff to 24h.
	CircuitMaxBackoff time.Duration
	// CircuitProbeSize is the most events a probe claims. Defaults to 1;
	// 1 to BatchSize.
	CircuitProbeSize int
	// RouteFunc picks an event's destination (topic, subject). An empty
	// result means "do not publish this event"; such an event with no
	// handler is released unstarted and uncharged, PENDING again after a
	// short back-off, for a replica that routes it (a rolling deploy), and
	// counted in Stats.Unroutable and logged at WARN; never FAILED. Set
	// PublishTypes to leave the types it does not route to other
	// dispatchers without claiming them at all. Defaults to the event
	// type. Used only with a Publisher.
	RouteFunc func(e outbox.Event) string

	// Middleware wraps every handler: those registered with Handle and
	// DefaultHandler. The chain is built once, when a handler is
	// registered; Middleware[0] is outermost (it sees each call first and
	// its result last), then Middleware[1], and so on, then the
	// middleware given to Handle for that handler, then the handler. An
	// empty chain costs nothing per event. Entries must not be nil.
	Middleware []outbox.Middleware
	// DefaultHandler, if set, handles the events of every type that no
	// Handle call registered a handler for (the catch-all), wrapped in
	// Middleware like the others; the event is then published as usual
	// when the router gives it a destination. With it the dispatcher
	// claims events of every type. Defaults to nil: the dispatcher claims
	// only the types it can deliver (see ClaimedTypes), and leaves other
	// types PENDING, counted in Stats.WaitingUnhandled and logged.
	DefaultHandler outbox.Handler

	// MaxSnoozes is how often one event may be given back with
	// outbox.Snooze: the snooze past it makes the event FAILED with
	// outbox.CodeSnoozeLimit (spending an attempt), so that no event
	// snoozes forever unnoticed. The count is the row's snoozes column; a
	// replay resets it. Defaults to 1,000; 1 to 1,000,000.
	MaxSnoozes int

	// OnOutcome is called once for every outcome this dispatcher recorded,
	// after it was committed: an event that became SENT (or was deleted,
	// with DeleteSent), a failed attempt returned to PENDING for a retry,
	// an event a handler snoozed, an event that became FAILED (the dead
	// letter), including those this dispatcher's recovery made FAILED
	// with worker_lost. It is not called for outcomes that could not be
	// recorded or whose fate is unknown (OnError receives those), nor for
	// events released unstarted (at stop, or suspects kept waiting).
	//
	// ctx carries the values of the context given to Start or Run, never its
	// cancellation. OnOutcome runs on the dispatcher's completion
	// goroutine (recovery's worker_lost outcomes on the coordinator's),
	// so keep it fast and never block: the next outcomes wait for it. The
	// two goroutines may call it at the same time. It may call Stats and
	// Trigger, but not Stop: Stop waits for the completion goroutine, which
	// is running the hook. Switch on o.Status and o.Snoozed: o.Err of a
	// snooze past MaxSnoozes (FAILED, snooze_limit) still wraps the snooze.
	OnOutcome func(ctx context.Context, o Outcome)
	// OnError is called for internal errors: failed claims, renewals and
	// completions, outcomes that could not be recorded because the lease
	// was lost (errors.Is(err, outbox.ErrLockLost)) or that the database
	// kept refusing (outbox.ErrOutcomeRefused), and outcomes whose write
	// may have taken effect although its reply was lost, where the row can
	// no longer tell (outbox.ErrOutcomeUnknown).
	OnError func(err error)
	// Logger receives lifecycle and error logs, never payloads. Defaults
	// to slog.Default().
	Logger *slog.Logger

	// MeterProvider receives the dispatcher's metrics (see
	// docs/observability.md). Defaults to otel.GetMeterProvider(), the
	// application's global provider, which records nothing until the
	// application installs one.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the dispatcher's spans: one per handler
	// call and one per Publish call, continuing the trace of the
	// transaction that emitted the event. Defaults to
	// otel.GetTracerProvider(), which records nothing until the
	// application installs one.
	TracerProvider trace.TracerProvider
	// BacklogSampleInterval is the least time between two samples of the
	// backlog gauges (pgoutbox.backlog.due and
	// pgoutbox.backlog.oldest_due_age), each one bounded query on the due
	// index, run by a goroutine of Run's when a collection of the
	// MeterProvider finds the last sample older than this (a collection
	// never waits for it). Defaults to 30s; 1s to 1h.
	BacklogSampleInterval time.Duration

	// now replaces time.Now for the dispatcher's local lease deadlines:
	// New builds the dispatcher's clock (d.clock) with it as its Now, and
	// its measured durations keep the real time (clock.Clock.Mono); only
	// this package's tests set it (export_test.go). The database clock
	// still decides every due and expiry time.
	now func() time.Time
	// onCircuit, when set, is called with each new state of the circuit,
	// under the circuit's lock; only this package's tests set it
	// (export_test.go).
	onCircuit func(CircuitState)
	// onRetentionBatch, when set, is called after each retention batch
	// with its status, its limit and what it did; only this package's
	// tests set it (export_test.go).
	onRetentionBatch func(status outbox.Status, limit int, res purge.Result)
	// onClaimed, when set, is called after each claim that took events,
	// before they are dispatched, with the claimed events; only this
	// package's tests set it (export_test.go).
	onClaimed func(events []outbox.Event)
	// onRecoverPass, when set, is called after each recovery pass with
	// the poll cycle's number, the statements it ran and the rows they
	// returned; only this package's tests set it (export_test.go).
	onRecoverPass func(poll uint64, statements, rows int)
	// suspectWait, when set, replaces LeaseDuration as how long a suspect
	// waits for the turn before it is released; only this package's tests
	// set it (export_test.go).
	suspectWait time.Duration
	// onFollowUpsOver, when set, is called on the coordinator goroutine
	// when the waker starts a claim and arms no follow-up after it: the
	// follow-up claims of the last wake-up are over once that claim
	// ends; only this package's tests set it (export_test.go).
	onFollowUpsOver func()
	// onDueProbe, when set, is called on the coordinator goroutine after
	// each next-due probe run once claims have settled, with how long
	// until the next due event and whether there is one; only this
	// package's tests set it (export_test.go).
	onDueProbe func(wait time.Duration, found bool)
}

// suspectTurnWait is how long a suspect waits for the suspect turn before
// it is released unstarted: LeaseDuration, unless a test shortened it.
func (c Config) suspectTurnWait() time.Duration { return cmp.Or(c.suspectWait, c.LeaseDuration) }

func (c Config) withDefaults() Config {
	c.Table = c.Table.WithDefaults()
	c.Owner = cmp.Or(c.Owner, defaultOwner())
	c.BatchSize = cmp.Or(c.BatchSize, 100)
	c.Concurrency = cmp.Or(c.Concurrency, 100)
	c.Claimers = cmp.Or(c.Claimers, 2)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, 30*time.Second)
	if !c.NoHandlerTimeout {
		c.HandlerTimeout = cmp.Or(c.HandlerTimeout, time.Minute)
	}
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 30*time.Second)
	if !c.NoDrain {
		c.DrainTimeout = cmp.Or(c.DrainTimeout, 30*time.Second)
	}
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.Backoff = c.Backoff.WithDefaults()
	c.WakeupProbeTimeout = cmp.Or(c.WakeupProbeTimeout, 5*time.Second)
	if !c.NoWakeupCooldown {
		c.WakeupCooldown = cmp.Or(c.WakeupCooldown, 20*time.Millisecond)
	}
	c.IdlePollInterval = cmp.Or(c.IdlePollInterval, c.PollInterval)
	c.RecoverEvery = cmp.Or(c.RecoverEvery, 10)
	c.RecoverBatchSize = cmp.Or(c.RecoverBatchSize, 1000)
	c.MaxRecoveries = cmp.Or(c.MaxRecoveries, 3)
	c.MaxSnoozes = cmp.Or(c.MaxSnoozes, 1000)
	if !c.KeepSent {
		c.RetainSent = cmp.Or(c.RetainSent, 24*time.Hour)
	}
	c.RetentionInterval = cmp.Or(c.RetentionInterval, time.Minute)
	c.RetentionBatchSize = cmp.Or(c.RetentionBatchSize, 5000)
	c.CircuitMinBackoff = cmp.Or(c.CircuitMinBackoff, c.PollInterval)
	c.CircuitMaxBackoff = cmp.Or(c.CircuitMaxBackoff, max(time.Minute, c.CircuitMinBackoff))
	c.CircuitProbeSize = cmp.Or(c.CircuitProbeSize, 1)
	if c.RouteFunc == nil {
		c.RouteFunc = func(e outbox.Event) string { return e.Type }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.MeterProvider = cmp.Or(c.MeterProvider, otel.GetMeterProvider())
	c.TracerProvider = cmp.Or(c.TracerProvider, otel.GetTracerProvider())
	c.BacklogSampleInterval = cmp.Or(c.BacklogSampleInterval, 30*time.Second)
	return c
}

func (c Config) validate() error {
	if err := c.Table.Validate(); err != nil {
		return &outbox.ConfigError{Field: "Table", Reason: "is invalid", Err: err}
	}
	checks := []struct {
		ok     bool
		option string
		reason string
	}{
		{pgvalue.TextProblem(c.Owner, maxOwnerLen) == "", "Owner", "must be at most 200 bytes of UTF-8 without NUL"},
		{between(c.BatchSize, 1, 10_000), "BatchSize", "must be between 1 and 10000"},
		{between(c.Concurrency, 1, 100_000), "Concurrency", "must be between 1 and 100000"},
		{between(c.Claimers, 1, 16), "Claimers", "must be between 1 and 16"},
		{between(c.PollInterval, 10*time.Millisecond, time.Hour), "PollInterval", "must be between 10ms and 1h"},
		{between(c.LeaseDuration, time.Second, time.Hour), "LeaseDuration", "must be between 1s and 1h"},
		{c.NoHandlerTimeout && c.HandlerTimeout == 0 || !c.NoHandlerTimeout && between(c.HandlerTimeout, time.Millisecond, 24*time.Hour), "HandlerTimeout", onlyWithout("between 1ms and 24h", "NoHandlerTimeout", "no timeout", c.NoHandlerTimeout)},
		{between(c.PublishTimeout, time.Millisecond, 24*time.Hour), "PublishTimeout", "must be between 1ms and 24h"},
		{c.NoDrain && c.DrainTimeout == 0 || !c.NoDrain && between(c.DrainTimeout, 1, time.Hour), "DrainTimeout", onlyWithout("at most 1h", "NoDrain", "cancelling handlers at once", c.NoDrain)},
		{between(c.MaxAttempts, 1, 1000), "MaxAttempts", "must be between 1 and 1000"},
		{c.Delivery == AtLeastOnce || c.Delivery == AtMostOnce, "Delivery", "must be AtLeastOnce or AtMostOnce"},
		{c.Ordering == Unordered || c.Ordering == PerKey, "Ordering", "must be Unordered or PerKey"},
		{c.HeadPolicy == BlockKey || c.HeadPolicy == SkipFailed && c.Ordering == PerKey, "HeadPolicy",
			"must be BlockKey, or SkipFailed with Ordering PerKey"},
		{c.OrderScope == ScopeKey || c.OrderScope == ScopeKeyAndType && c.Ordering == PerKey, "OrderScope",
			"must be ScopeKey, or ScopeKeyAndType with Ordering PerKey"},
		{c.Wakeup >= WakeupAuto && c.Wakeup <= WakeupDisabled, "Wakeup", "must be WakeupAuto, WakeupRequired or WakeupDisabled"},
		{between(c.WakeupProbeTimeout, 100*time.Millisecond, time.Minute), "WakeupProbeTimeout", "must be between 100ms and 1m"},
		{c.NoWakeupCooldown && c.WakeupCooldown == 0 || !c.NoWakeupCooldown && between(c.WakeupCooldown, 1, 10*time.Second), "WakeupCooldown", onlyWithout("at most 10s", "NoWakeupCooldown", "none", c.NoWakeupCooldown)},
		{between(c.IdlePollInterval, c.PollInterval, time.Hour), "IdlePollInterval", "must be between PollInterval and 1h"},
		{between(c.RecoverEvery, 1, 1000), "RecoverEvery", "must be between 1 and 1000"},
		{between(c.RecoverBatchSize, 1, 100_000), "RecoverBatchSize", "must be between 1 and 100000"},
		{between(c.MaxRecoveries, 1, 1000), "MaxRecoveries", "must be between 1 and 1000"},
		{between(c.MaxSnoozes, 1, 1_000_000), "MaxSnoozes", "must be between 1 and 1000000"},
		{!slices.ContainsFunc(c.Middleware, isNil), "Middleware", "must not hold nil"},
		{c.KeepSent && c.RetainSent == 0 || !c.KeepSent && between(c.RetainSent, c.minRetain(), maxRetain), "RetainSent", onlyWithout("between 1m (and twice LeaseDuration) and 100 years", "KeepSent", "keeping SENT rows", c.KeepSent)},
		{c.RetainFailed == 0 || between(c.RetainFailed, c.minRetain(), maxRetain), "RetainFailed", "must be zero (keep FAILED rows) or between 1m (and twice LeaseDuration) and 100 years"},
		{between(c.RetentionInterval, 10*time.Millisecond, 24*time.Hour), "RetentionInterval", "must be between 10ms and 24h"},
		{between(c.RetentionBatchSize, 1, 100_000), "RetentionBatchSize", "must be between 1 and 100000"},
		{between(c.BacklogSampleInterval, time.Second, time.Hour), "BacklogSampleInterval", "must be between 1s and 1h"},
		{between(c.CircuitMinBackoff, 10*time.Millisecond, time.Hour), "CircuitMinBackoff", "must be between 10ms and 1h"},
		{between(c.CircuitMaxBackoff, c.CircuitMinBackoff, 24*time.Hour), "CircuitMaxBackoff", "must be between CircuitMinBackoff and 24h"},
		{between(c.CircuitProbeSize, 1, c.BatchSize), "CircuitProbeSize", "must be between 1 and BatchSize"},
		{len(c.PublishTypes) == 0 || c.Publisher != nil, "PublishTypes", "needs a Publisher"},
		{!slices.ContainsFunc(c.PublishTypes, badType), "PublishTypes",
			"must hold types that are not blank, at most 255 bytes of UTF-8 without NUL"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return &outbox.ConfigError{Field: ch.option, Reason: ch.reason}
		}
	}
	return c.Backoff.Validate("Backoff")
}

func between[T cmp.Ordered](v, lo, hi T) bool { return v >= lo && v <= hi }

// onlyWithout is the reason for a duration out of its range, which it must
// be in unless the bool field that switches it off is set, and then zero.
func onlyWithout(rng, field, what string, set bool) string {
	if set {
		return "must be zero when " + field + " is set"
	}
	return "must be " + rng + " (set " + field + " for " + what + ")"
}

// minRetain is the shortest RetainSent or RetainFailed: a minute, and
// twice LeaseDuration, so that a completion whose reply was lost reads
// its row back before the retention job may delete it.
func (c Config) minRetain() time.Duration { return max(time.Minute, 2*c.LeaseDuration) }

// maxRetain bounds RetainSent and RetainFailed: 100 years.
const maxRetain = 100 * 365 * 24 * time.Hour

// maxOwnerLen bounds Config.Owner, in bytes.
const maxOwnerLen = 200

// defaultOwner is "<hostname>-<pid>-<random>", with the host name cut to
// 100 bytes of valid UTF-8 without NUL so that the result passes validate.
func defaultOwner() string {
	host, err := os.Hostname()
	host = strings.ToValidUTF8(strings.ReplaceAll(host, "\x00", ""), "")
	for len(host) > 100 {
		_, size := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-size]
	}
	if err != nil || host == "" {
		host = "dispatcher"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}

func isNil(m outbox.Middleware) bool { return m == nil }

// maxTypeLen bounds an event type, in bytes, as the emitter does.
const maxTypeLen = 255

// badType reports whether t cannot be an event type.
func badType(t string) bool {
	return strings.TrimSpace(t) == "" || pgvalue.TextProblem(t, maxTypeLen) != ""
}
