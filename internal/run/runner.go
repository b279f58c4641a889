package run

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/tally"
	"github.com/pgoutbox/pgoutbox/internal/workers"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrHardStop is the cancel cause of handler contexts after the drain
// timeout: a call it cancelled is released rather than charged
// (at-least-once; see classify).
var ErrHardStop = errors.New("pgoutbox: dispatcher stopped")

// Config is what a runner needs: the dispatcher's held set, reporter and
// circuit, the clock, the publisher and its routing, and the few settings
// of the dispatcher's Config that decide how a handler or publish call
// runs and ends.
type Config struct {
	Mode    Mode             // the scheduling mode (NewMode); required
	Held    *held.Set        // the events held; required
	Report  *report.Reporter // counts, logs, metrics and spans; required
	Circuit *circuit.Circuit // the publisher's circuit; required
	Clock   clock.Clock      // handler times and slot waits: its real-time reading (Mono, Elapsed)
	Logger  *slog.Logger     // the unroutable warnings; required
	Table   string           // for the unroutable warnings
	Owner   string           // for the unroutable warnings

	// Publisher receives the events with a destination; nil for none.
	Publisher outbox.Publisher
	// RouteFunc is each published event's destination ("": not published).
	RouteFunc func(outbox.Event) string
	// PublishTypes is the types published (nil: every type); PublishSet
	// is the same as a set.
	PublishTypes []string
	PublishSet   map[string]bool

	AtMostOnce     bool          // Delivery AtMostOnce (else at-least-once)
	HandlerTimeout time.Duration // each handler call's timeout (0: none)
	PublishTimeout time.Duration // each publish call's timeout (0: none)
	MaxSnoozes     int           // the snoozes an event may take
	SkipFailed     bool          // HeadPolicy SkipFailed (per key: a FAILED head does not stop its key)
	ByType         bool          // OrderScope ScopeKeyAndType (per key: chains by key and type)
	SuspectWait    time.Duration // how long a suspect waits for its turn: LeaseDuration (tests shorten it)
	Concurrency    int           // handler slots
	Claimers       int           // claims in flight at once (but in claim order: 1)
	BatchSize      int           // suspects held beside the room (see suspectsAhead)

	// Release returns items that never started to PENDING, uncharged;
	// when that fails it reports failed and lets them go all the same.
	Release func(items []*held.Item, failed string)
	// FinalFailure reports whether the failed attempt an item's result
	// records is final (per key, SkipFailed: a final failure lets its key
	// go on).
	FinalFailure func(it *held.Item) bool
}

// Runner runs the claimed batches of one dispatcher: it calls the
// handlers in the dispatcher's handler slots, publishes, and hands each
// event's result to the held set, in the order its scheduling mode sets.
type Runner struct {
	cfg     Config
	mode    Mode
	held    *held.Set
	report  *report.Reporter
	circuit *circuit.Circuit
	clock   clock.Clock
	started time.Time // anchors slowUntil to the clock's monotonic reading

	slots    chan struct{} // one token per running handler call, Concurrency in all
	suspects chan struct{} // one token: the suspect turn (see suspect.go)
	// unroutable counts the events claimed and not routed (see
	// unroutable.go).
	unroutable tally.Unroutable

	// Set by Start before any batch runs; read-only after.
	workers  *workers.Pool             // goroutines for handler calls
	handlers map[string]outbox.Handler // wrapped in their middleware
	fallback outbox.Handler            // Config.DefaultHandler wrapped; nil when unset

	// handlerTime is the running average of handler durations in
	// nanoseconds; 0 before the first call returns (see slots.go). Every
	// handler call writes it: it has a cache line of its own, away from
	// the fields every call reads.
	_           [64]byte
	handlerTime atomic.Int64
	_           [56]byte
	// slowUntil is when handlers stop counting as slow (monotonic
	// nanoseconds since started; see slots.go).
	slowUntil atomic.Int64
}

// New returns the runner of cfg, and sets the held set to run in waves
// when the mode orders per key. Call Start before the first batch.
func New(cfg Config) *Runner {
	r := &Runner{
		cfg: cfg, mode: cfg.Mode, held: cfg.Held, report: cfg.Report, circuit: cfg.Circuit, clock: cfg.Clock,
		slots:    make(chan struct{}, cfg.Concurrency),
		suspects: make(chan struct{}, 1),
	}
	r.started = r.clock.Mono()
	if r.mode.Ordered() {
		r.held.RunInWaves()
	}
	r.mode.bind(r)
	return r
}

// Start gives the runner its workers and the registered handlers (each
// wrapped in its middleware; fallback for the other types, nil for none),
// fixed from then on. The dispatcher calls it once, before its first
// claim; the runner needs no stop of its own: its batches end when their
// items are let go.
func (r *Runner) Start(w *workers.Pool, handlers map[string]outbox.Handler, fallback outbox.Handler) {
	r.workers, r.handlers, r.fallback = w, handlers, fallback
}

// Unroutable is the count, by type, of the events released as unroutable
// (nil before the first).
func (r *Runner) Unroutable() map[string]uint64 { return r.unroutable.Counts() }

// SlotsTaken is how many handler slots are taken now (for tests: none
// once nothing is in flight).
func (r *Runner) SlotsTaken() int { return len(r.slots) }

// HandlersTiny reports whether handlers run as tiny ones, a few workers
// per batch (see handlersTiny; for tests).
func (r *Runner) HandlersTiny() bool { return r.handlersTiny() }

// SetHandlerTime sets the running average of handler durations, as if
// the handlers so far had taken avg each (for tests).
func (r *Runner) SetHandlerTime(avg time.Duration) { r.handlerTime.Store(int64(avg)) }
