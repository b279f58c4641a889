package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/claim"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/peers"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/run"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
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
	cfg    Config
	pool   *pgxpool.Pool
	store  *lease.Store
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
	stopCh         chan struct{} // Stop was called
	hardStopped    atomic.Bool   // the drain timed out and cancelled the calls still running
	done           chan struct{} // stopped: dispatching ended, or Stop came before a start
	stopOnce       sync.Once

	// health is what Health reports (see health.go).
	health healthState
	// peers are the other dispatchers of the table heard (see peers.go).
	peers peers.Set

	// Set by start before any goroutine starts; read-only after.
	dbCtx     context.Context // the dispatcher's own statements: never cancelled
	workCtx   context.Context // handlers and publishes: cancelled at the hard stop
	completer *completer

	// leaseWrites keeps this dispatcher's renewals, start marks and
	// releases from running at once: they skip rows locked elsewhere, and
	// must not find each other's. It is never held while held.Set.mu or
	// mu is taken, nor taken while they are held.
	leaseWrites sync.Mutex
	// refSize bounds the statements of renewals and start marks (refs
	// per statement), shrunk by statement timeouts (see stmtsize.WriteRefs).
	// Guarded by leaseWrites.
	refSize stmtsize.Size

	// mu guards the fields below. It is never held while held.Set.mu or
	// leaseWrites is taken, nor taken while they are held.
	mu       sync.Mutex
	state    State
	result   error                     // dispatching's result, once stateStopped
	ran      bool                      // dispatching began (a stop before it is a clean stop for Run)
	handlers map[string]outbox.Handler // wrapped in their middleware
	// defaultHandler is Config.DefaultHandler wrapped in Config.Middleware;
	// nil when unset.
	defaultHandler outbox.Handler
}

// State is where a dispatcher is in its life (see Health).
type State int

const (
	// StateNew is a dispatcher not started yet, or whose start failed (it
	// may be started again).
	StateNew State = iota
	// StateStarting is a dispatcher running its start-up checks.
	StateStarting
	// StateRunning is a dispatcher dispatching.
	StateRunning
	// StateStopping is a dispatcher that stopped claiming and is draining.
	StateStopping
	// StateStopped is a dispatcher that stopped: it cannot run again.
	StateStopped
)

// String names the state: "new", "starting", "running", "stopping" or
// "stopped".
func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateRunning:
		return "running"
	case StateStopping:
		return "stopping"
	case StateStopped:
		return "stopped"
	}
	return "new"
}

// New returns a dispatcher for the table in cfg, reading and writing through
// pool. It validates cfg and returns an *outbox.ConfigError naming the first
// field out of range, or an *outbox.InputError for a nil pool. It does not
// touch the database; Start and Run do.
func New(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, &outbox.InputError{Field: "pool", Reason: "must not be nil"}
	}
	clock := cfg.now // nil: time.Now, which the held set reads once where it can
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
		cfg: cfg, pool: pool, store: store, listenerConfig: listenerConfig, defaultHandler: defaultHandler,
		report:         newReporter(cfg),
		publish:        claim.PublishSet(cfg.PublishTypes),
		held:           held.NewSet(clock, cfg.LeaseDuration),
		refSize:        stmtsize.New(lease.MaxRefsPerStatement),
		trigger:        make(chan struct{}, 1),
		retryScheduled: make(chan struct{}, 1),
		stopCh:         make(chan struct{}),
		done:           make(chan struct{}),
		handlers:       make(map[string]outbox.Handler),
	}
	d.circuit = newCircuit(cfg, d.Trigger)
	d.mode = run.NewMode(cfg.Ordering == PerKey, cfg.Concurrency)
	d.runner = d.newRunner()
	d.claimer = d.newClaimer()
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
	switch {
	case d.handlers[eventType] != nil:
		return &outbox.InputError{Field: "eventType", Reason: fmt.Sprintf("%q already has a handler", eventType)}
	case d.state != StateNew:
		return ErrStarted
	}
	d.handlers[eventType] = wrapped
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
	s.Overrunning, _ = d.held.Overrunning(time.Now())
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
	d.fillPeers(&s)
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
	go func() { _ = d.dispatchUntilStop(ctx, listener) }() // its result reaches Stop, Err and Health
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
	return d.dispatchUntilStop(ctx, listener)
}

// errInterrupted is start's error when a stop (ctx ending, or Stop)
// interrupted the start-up checks.
var errInterrupted = errors.New("pgoutbox: dispatcher start interrupted")

// start moves a new dispatcher to starting and runs the start-up checks.
// When they fail it goes back to new, unless a stop came meanwhile.
func (d *Dispatcher) start(ctx context.Context) (*pgx.Conn, error) {
	d.mu.Lock()
	switch d.state {
	case StateNew:
		d.state = StateStarting
	case StateStopped:
		ran := d.ran
		d.mu.Unlock()
		if !ran { // stopped before it started: as a stop during the checks
			return nil, errInterrupted
		}
		return nil, ErrStopped
	case StateStopping:
		d.mu.Unlock()
		return nil, ErrStopped
	default:
		d.mu.Unlock()
		return nil, ErrRunning
	}
	d.mu.Unlock()
	listener, err := d.startUp(ctx)
	if err == nil && d.stoppedStarting(ctx) {
		if listener != nil {
			_ = listener.Close(context.WithoutCancel(ctx))
		}
		err = errInterrupted
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case err == nil:
		d.state, d.ran = StateRunning, true
	case errors.Is(err, errInterrupted) || d.stopRequested():
		d.stopped(nil)
		err = errInterrupted // the stop was taken: a failed check is no reason to retry
	default:
		d.state = StateNew
	}
	return listener, err
}

// dispatchUntilStop dispatches until ctx ends or Stop is called, drains,
// and records the result.
func (d *Dispatcher) dispatchUntilStop(ctx context.Context, listener *pgx.Conn) error {
	err := d.run(ctx, listener)
	d.mu.Lock()
	d.stopped(err)
	d.mu.Unlock()
	return err
}

// stopped records the end; d.mu must be held.
func (d *Dispatcher) stopped(result error) {
	d.result, d.state = result, StateStopped
	close(d.done)
}

// setState records a change of state.
func (d *Dispatcher) setState(s State) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state = s
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
	d.stopOnce.Do(func() { close(d.stopCh) })
	d.mu.Lock()
	if d.state == StateNew {
		d.stopped(nil)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
		return d.Err()
	case <-ctx.Done():
		return d.stopCutShort(ctx)
	}
}

// Done returns a channel that is closed when the dispatcher has stopped:
// dispatching ended (Stop, or the end of Start's ctx) and drained, or Stop
// came before a start. A start that failed does not close it.
func (d *Dispatcher) Done() <-chan struct{} { return d.done }

// Err returns the result of dispatching once Done is closed: nil after a
// clean stop, ErrDrainTimeout when handlers had to be cancelled. It
// returns nil before.
func (d *Dispatcher) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.result
}

// stopRequested reports whether Stop was called.
func (d *Dispatcher) stopRequested() bool {
	select {
	case <-d.stopCh:
		return true
	default:
		return false
	}
}
