package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/claim"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/complete"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/lifecycle"
	"github.com/pgoutbox/pgoutbox/internal/peers"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/run"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrDrainTimeout is returned by Run and Stop (and Err) when in-flight handlers did
// not finish within Config.DrainTimeout and had their contexts cancelled.
// Their events were released or recorded as usual; nothing is lost. The
// error returned is a *DrainTimeoutError naming the events still running
// then; match it with errors.Is.
var ErrDrainTimeout = errors.New("pgoutbox: drain timeout exceeded, in-flight handlers were cancelled")

// errHardStop is the cancel cause of handler contexts after the drain
// timeout.
var errHardStop = run.ErrHardStop

// ErrStarted is returned by Handle after Start or Run: handlers are fixed
// once the dispatcher starts.
var ErrStarted = errors.New("pgoutbox: dispatcher: Handle called after Start or Run")

// ErrRunning is returned by Start and Run when the dispatcher is already
// starting or running: a dispatcher runs once.
var ErrRunning = errors.New("pgoutbox: dispatcher is already running")

// ErrStopped is returned by Start and Run when the dispatcher was stopped
// (by Stop, or by the end of the context its Start or Run was given): a
// stopped dispatcher cannot run again; create a new one with New.
var ErrStopped = errors.New("pgoutbox: dispatcher was stopped; create a new one with New")

// Dispatcher claims committed events from one outbox table and delivers
// them to local handlers and/or a publisher. Any number of dispatchers, in
// any number of processes, may serve the same table.
type Dispatcher struct {
	cfg   Config
	pool  *pgxpool.Pool
	store *lease.Store
	// clock is the one clock of its timing decisions (internal/clock): its
	// Now the local clock of lease deadlines (Config.now, set by tests),
	// its Mono the real time of measured durations.
	clock  clock.Clock
	report *report.Reporter // counts, logs, metrics and spans (internal/report)
	held   *held.Set        // the events held, and every change of their state
	// publish is Config.PublishTypes as a set; nil when unset.
	publish map[string]bool
	// mode is the scheduling mode, chosen once by New (internal/run's
	// Mode): the claims ask it how to claim, and it runs their batches.
	mode run.Mode
	// runner runs the claimed batches: handlers, publishes (internal/run).
	runner *run.Runner
	// claimer decides when to claim, claims and recovers (internal/claim).
	claimer *claim.Claimer
	// circuit pauses publishing while the destination is unavailable (see
	// circuit.go).
	circuit *circuit.Circuit

	listenerConfig *pgx.ConnConfig // the dedicated LISTEN connection
	wakeupsActive  atomic.Bool     // the listener is connected and listening

	trigger        chan struct{} // manual and notify wake-ups, coalesced
	retryScheduled chan struct{} // the completer scheduled a retry: the next due time moved
	hardStopped    atomic.Bool   // the drain timed out and cancelled the calls still running
	// life is where it is in its life, and how it ended (see life.go).
	life *life

	// health is what Health reports (see health.go).
	health healthState
	// greeter says hello to the other dispatchers of the table and keeps
	// those heard (see peers.go).
	greeter *peers.Greeter

	// Set by start before any goroutine starts; read-only after.
	dbCtx     context.Context     // the dispatcher's own statements: never cancelled
	workCtx   context.Context     // handlers and publishes: cancelled at the hard stop
	completer *complete.Completer // see internal/complete

	// mu guards the fields below. It is never held while held.Set.mu or
	// the keeper's lease-writes lock (see internal/keeper) is taken, nor
	// taken while they are held; the life's lock may be taken while it is held
	// (Handle), never the other way round.
	mu       sync.Mutex
	handlers map[string]outbox.Handler // wrapped in their middleware
	// defaultHandler is Config.DefaultHandler wrapped in Config.Middleware;
	// nil when unset.
	defaultHandler outbox.Handler
}

// State is where a dispatcher is in its life (see Health).
type State int

// The values are those of internal/lifecycle's State, which the
// dispatcher shares with the relay.
const (
	// StateNew is a dispatcher not started yet, or whose start failed (it
	// may be started again).
	StateNew = State(lifecycle.StateNew)
	// StateStarting is a dispatcher running its start-up checks.
	StateStarting = State(lifecycle.StateStarting)
	// StateRunning is a dispatcher dispatching.
	StateRunning = State(lifecycle.StateRunning)
	// StateStopping is a dispatcher that stopped claiming and is draining.
	StateStopping = State(lifecycle.StateStopping)
	// StateStopped is a dispatcher that stopped: it cannot run again.
	StateStopped = State(lifecycle.StateStopped)
)

// String names the state: "new", "starting", "running", "stopping" or
// "stopped".
func (s State) String() string { return lifecycle.State(s).String() }

// New returns a dispatcher for the table in cfg, reading and writing through
// pool. It validates cfg and returns an *outbox.ConfigError naming the first
// field out of range, or an *outbox.InputError for a nil pool. It does not
// touch the database; Start and Run do.
func New(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, &outbox.InputError{Field: "pool", Reason: "must not be nil"}
	}
	clk := clock.New(cfg.now) // nil: the wall clock, which the held set reads once where it can
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store, err := lease.New(cfg.Table)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "Table", Reason: "is invalid", Err: err}
	}
	listenerConfig := cfg.ListenerConnConfig
	if listenerConfig == nil {
		listenerConfig = pool.Config().ConnConfig.Copy()
		if listenerConfig.RuntimeParams["application_name"] == "" {
			listenerConfig.RuntimeParams["application_name"] = "pgoutbox-listener"
		}
	}
	var defaultHandler outbox.Handler
	if cfg.DefaultHandler != nil {
		if defaultHandler = wrap(cfg.DefaultHandler, cfg.Middleware); defaultHandler == nil {
			return nil, &outbox.ConfigError{Field: "Middleware", Reason: "returned a nil handler"}
		}
	}
	d := &Dispatcher{
		cfg: cfg, clock: clk, pool: pool, store: store, listenerConfig: listenerConfig, defaultHandler: defaultHandler,
		report:         newReporter(cfg, clk),
		health:         healthState{clock: clk},
		publish:        claim.PublishSet(cfg.PublishTypes),
		held:           held.NewSet(clk, cfg.LeaseDuration),
		trigger:        make(chan struct{}, 1),
		retryScheduled: make(chan struct{}, 1),
		life:           newLife(),
		handlers:       make(map[string]outbox.Handler),
	}
	d.circuit = newCircuit(cfg, clk, d.Trigger)
	d.mode = run.NewMode(cfg.Ordering == PerKey, cfg.Concurrency)
	d.runner = newRunner(d)
	d.greeter = newGreeter(cfg, pool, d.report, d.Trigger)
	d.claimer = newClaimer(d)
	return d, nil
}

// Handle registers h as the local handler of events of eventType, wrapped
// in Config.Middleware and then in mw (the first of mw outermost of the
// two; see Config.Middleware). Register every handler before Start. It
// returns an *outbox.InputError naming "eventType" for an empty type or one
// that already has a handler, "h" for a nil handler, "mw" for nil
// middleware or a middleware that returns a nil handler, and ErrStarted
// for a call after Start or Run.
func (d *Dispatcher) Handle(eventType string, h outbox.Handler, mw ...outbox.Middleware) error {
	switch {
	case strings.TrimSpace(eventType) == "":
		return &outbox.InputError{Field: "eventType", Reason: "is empty"}
	case badType(eventType):
		return &outbox.InputError{Field: "eventType", Reason: "must be at most 255 bytes of UTF-8 without NUL"}
	case h == nil:
		return &outbox.InputError{Field: "h", Reason: "is nil"}
	case slices.ContainsFunc(mw, isNil):
		return &outbox.InputError{Field: "mw", Reason: "holds a nil middleware"}
	}
	// The middleware runs outside the lock: it may call the dispatcher.
	wrapped := wrap(h, slices.Concat(d.cfg.Middleware, mw))
	if wrapped == nil {
		return &outbox.InputError{Field: "mw", Reason: fmt.Sprintf("returned a nil handler for %q", eventType)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.handlers[eventType] != nil {
		return &outbox.InputError{Field: "eventType", Reason: fmt.Sprintf("%q already has a handler", eventType)}
	}
	if !d.life.IfNew(func() { d.handlers[eventType] = wrapped }) {
		return ErrStarted
	}
	return nil
}

// wrap returns h wrapped in chain, chain[0] outermost; nil if a
// middleware returned nil.
func wrap(h outbox.Handler, chain []outbox.Middleware) outbox.Handler {
	for i := len(chain) - 1; i >= 0 && h != nil; i-- {
		h = chain[i](h)
	}
	return h
}

// Trigger asks for a claim cycle now instead of at the next poll. Calls are
// coalesced: many triggers before the coordinator wakes cause one cycle. It
// never blocks, and does nothing when the dispatcher is not running.
func (d *Dispatcher) Trigger() { signal(d.trigger) }

// Stats returns a snapshot of the counters and gauges.
func (d *Dispatcher) Stats() Stats {
	s := statsOf(&d.report.Counters, d.held.Len())
	s.Overrunning, _ = d.held.Overrunning(d.clock.Mono())
	s.WakeupsActive = d.wakeupsActive.Load()
	state, _ := d.circuit.Snapshot()
	s.Circuit = CircuitState(state)
	if byType, total := d.claimer.Waiting(); byType != nil {
		s.WaitingUnhandledByType = byType
		s.WaitingUnhandled += total
	}
	if byType := d.runner.Unroutable(); byType != nil {
		s.UnroutableByType = byType
	}
	conflicts, hellos := d.greeter.Conflicts()
	s.ModeConflicts, s.Hellos = len(conflicts), hellos
	return s
}

// Start runs the start-up checks and, when they pass, dispatches in the
// background until ctx ends or Stop is called; then it drains as Run does.
// It returns once dispatching has begun, or with the error that kept it
// from starting:
//
//   - a missing table (errors.Is outbox.ErrMissingTable), naming it;
//   - a schema that does not match what this version needs: a
//     *migrations.VerifyError naming each object with its expected and
//     actual state (set Config.SkipVerify to start without this check; on
//     a schema version newer than this library knows, for rolling
//     upgrades, only a missing object refuses the start, and definitions
//     that differ are logged at INFO);
//   - with Ordering PerKey, an *OrderIndexError (errors.Is
//     ErrNoOrderIndex) when the table has no valid per-key order index
//     (set migrations.Config.KeyOrder and migrate; the error gives the
//     statement that builds it);
//   - in WakeupRequired mode, ErrWakeupUnavailable when the wake-up probe
//     fails (in WakeupAuto mode the probe runs in the background and
//     dispatching does not wait for it);
//   - ErrRunning when the dispatcher is starting or running, ErrStopped
//     when it is stopping or stopped;
//   - ctx's error, or ErrStopped, when ctx ends or Stop is called before
//     or during the checks (the dispatcher is then stopped), whatever the
//     checks found.
//
// A start that fails on its checks leaves the dispatcher as New returned
// it: it may be started again (after migrating, say). ctx bounds the
// checks and the dispatching both, and its values reach handlers and
// hooks; give it the context of the program's life, not a short-lived
// one. After Start, Stop returns the result of dispatching (nil, or
// ErrDrainTimeout), as do Err once Done is closed, and Health.
func (d *Dispatcher) Start(ctx context.Context) error {
	listener, err := d.start(ctx)
	switch {
	case errors.Is(err, errInterrupted):
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrStopped
	case err != nil:
		return err
	}
	go func() { _ = d.life.Ended(d.run(ctx, listener)) }() // its result reaches Stop, Err and Health
	return nil
}

// Run is Start followed by a wait for the end: it runs the start-up checks,
// dispatches until ctx ends or Stop is called, then stops claiming,
// returns claimed-but-unstarted events to PENDING, lets in-flight handlers
// finish within DrainTimeout (cancelling their contexts after it), records
// their outcomes and returns. It returns nil after a clean stop,
// ErrDrainTimeout when handlers had to be cancelled, or the error that kept
// it from starting (see Start). A stop before Run or during its start-up
// checks is a clean stop: Run returns nil. It returns ErrRunning while
// another start or run is under way, and ErrStopped once a dispatching
// began has reached stopping.
// Prefer Start, which reports a start-up error before the program goes on.
func (d *Dispatcher) Run(ctx context.Context) error {
	listener, err := d.start(ctx)
	switch {
	case errors.Is(err, errInterrupted):
		return nil
	case err != nil:
		return err
	}
	return d.life.Ended(d.run(ctx, listener))
}

// start moves a new dispatcher to starting and runs the start-up checks.
// When they fail it goes back to new, unless a stop came meanwhile.
// (Start and Run then dispatch until ctx ends or Stop is called, drain,
// and record the result: life.Ended.)
func (d *Dispatcher) start(ctx context.Context) (*pgx.Conn, error) {
	if err := d.life.Begin(); err != nil {
		return nil, err
	}
	listener, err := d.startUp(ctx)
	if err == nil && d.life.StoppedStarting(ctx) {
		if listener != nil {
			_ = listener.Close(context.WithoutCancel(ctx))
		}
		err = errInterrupted
	}
	return listener, d.life.Started(err)
}

// Stop asks the dispatcher to stop gracefully and waits, bounded by ctx,
// for it to end; it then returns the result of dispatching (nil, or
// ErrDrainTimeout), or ctx's error if ctx ended first, naming the handler
// and publish calls still running (wrapping a *DrainTimeoutError once the
// drain timed out). It may be called
// any number of times, from any goroutine, before or after Start or Run:
// before, it stops the dispatcher (Start then returns ErrStopped, and Run
// nil: a clean stop).
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.life.Stop()
	select {
	case <-d.life.Done():
		return d.Err()
	case <-ctx.Done():
		return stopCutShort(ctx, d.held, d.hardStopped.Load())
	}
}

// Done returns a channel that is closed when the dispatcher has stopped:
// dispatching ended (Stop, or the end of Start's ctx) and drained, or Stop
// came before a start. A start that failed does not close it.
func (d *Dispatcher) Done() <-chan struct{} { return d.life.Done() }

// Err returns the result of dispatching once Done is closed: nil after a
// clean stop, ErrDrainTimeout when handlers had to be cancelled. It
// returns nil before.
func (d *Dispatcher) Err() error { return d.life.Err() }
