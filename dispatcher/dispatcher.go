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

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrDrainTimeout is returned by Run and Stop when in-flight handlers did
// not finish within Config.DrainTimeout and had their contexts cancelled.
// Their events were released or recorded as usual; nothing is lost.
var ErrDrainTimeout = errors.New("pgoutbox: drain timeout exceeded, in-flight handlers were cancelled")

// errHardStop is the cancel cause of handler contexts after the drain
// timeout.
var errHardStop = errors.New("pgoutbox: dispatcher stopped")

// ErrStarted is returned by Handle after Run was called: handlers are fixed
// once the dispatcher starts.
var ErrStarted = errors.New("pgoutbox: dispatcher: Handle called after Run")

// Dispatcher claims committed events from one outbox table and delivers
// them to local handlers and/or a publisher. Any number of dispatchers, in
// any number of processes, may serve the same table.
type Dispatcher struct {
	cfg   Config
	pool  *pgxpool.Pool
	store *lease.Store
	*reporter
	held  *heldSet // the events held, and every change of their state
	kinds kinds    // what it claims and publishes (see types.go)

	listenerConfig *pgx.ConnConfig // the dedicated LISTEN connection
	wakeupsActive  atomic.Bool     // the listener is connected and listening

	trigger        chan struct{} // manual and notify wake-ups, coalesced
	retryScheduled chan struct{} // the completer scheduled a retry: the next due time moved
	slots          chan struct{} // one token per running handler call, Concurrency in all
	suspects       chan struct{} // one token: the suspect turn (see suspect.go)
	stopCh         chan struct{} // Stop was called
	done           chan struct{} // Run returned
	stopOnce       sync.Once

	// Set by Run before any goroutine starts; read-only after.
	dbCtx     context.Context // the dispatcher's own statements: never cancelled
	workCtx   context.Context // handlers and publishes: cancelled at the hard stop
	workers   *workers        // goroutines for handler calls
	completer *completer

	// handlerTime is the running average of handler durations in
	// nanoseconds; 0 before the first call returns (see start.go). Every
	// handler call writes it: it has a cache line of its own, away from
	// the fields every call reads or locks (held, reporter, mu).
	_           [64]byte
	handlerTime atomic.Int64
	_           [56]byte
	// slowUntil is when handlers stop counting as slow (monotonic
	// nanoseconds since clockStart; see start.go).
	slowUntil atomic.Int64

	// leaseWrites keeps this dispatcher's renewals, start marks and
	// releases from running at once: they skip rows locked elsewhere, and
	// must not find each other's. It is never held while heldSet.mu or
	// mu is taken, nor taken while they are held.
	leaseWrites sync.Mutex

	// mu guards the fields below. It is never held while heldSet.mu or
	// leaseWrites is taken, nor taken while they are held.
	mu       sync.Mutex
	state    runState
	result   error
	handlers map[string]outbox.Handler // wrapped in their middleware
	// defaultHandler is Config.DefaultHandler wrapped in Config.Middleware;
	// nil when unset.
	defaultHandler outbox.Handler
}

type runState int

const (
	stateNew runState = iota
	stateRunning
	stateDone
)

// New returns a dispatcher for the table in cfg, reading and writing through
// pool. It validates cfg and returns an *outbox.ConfigError naming the first
// field out of range, or an *outbox.InputError for a nil pool. It does not
// touch the database; Run does.
func New(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, &outbox.InputError{Field: "pool", Reason: "must not be nil"}
	}
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
	return &Dispatcher{
		cfg: cfg, pool: pool, store: store, listenerConfig: listenerConfig, defaultHandler: defaultHandler,
		reporter:       newReporter(cfg),
		kinds:          kinds{publish: publishSet(cfg)},
		held:           newHeldSet(cfg.now, cfg.LeaseDuration),
		trigger:        make(chan struct{}, 1),
		retryScheduled: make(chan struct{}, 1),
		slots:          make(chan struct{}, cfg.Concurrency),
		suspects:       make(chan struct{}, 1),
		stopCh:         make(chan struct{}),
		done:           make(chan struct{}),
		handlers:       make(map[string]outbox.Handler),
	}, nil
}

// Handle registers h as the local handler of events of eventType, wrapped
// in Config.Middleware and then in mw (the first of mw outermost of the
// two; see Config.Middleware). Register every handler before Run. It
// returns an *outbox.InputError naming "eventType" for an empty type or one
// that already has a handler, "h" for a nil handler, "mw" for nil
// middleware or a middleware that returns a nil handler, and ErrStarted
// for a call after Run.
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
	case d.state != stateNew:
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
	s := d.stats.snapshot(d.held.len())
	s.WakeupsActive = d.wakeupsActive.Load()
	d.kinds.waiting.fill(&s)
	return s
}

// Run dispatches until ctx ends or Stop is called, then stops claiming,
// returns claimed-but-unstarted events to PENDING, lets in-flight handlers
// finish within DrainTimeout (cancelling their contexts after it), records
// their outcomes and returns. It returns nil after a clean stop,
// ErrDrainTimeout when handlers had to be cancelled, or the error that kept
// it from starting (for example outbox.ErrMissingTable, wrapped, for a
// Table that was never migrated). A stop (ctx
// ending, or Stop) at any moment is a clean stop: during the start-up
// checks too, which it interrupts, Run returns nil.
//
// Run may be called once; later calls wait for the first to end and return
// its result. After Stop, Run returns nil at once.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.state != stateNew {
		d.mu.Unlock()
		<-d.done
		return d.result
	}
	d.state = stateRunning
	d.mu.Unlock()
	err := d.run(ctx)
	d.mu.Lock()
	d.result, d.state = err, stateDone
	d.mu.Unlock()
	close(d.done)
	return err
}

// Stop asks Run to stop gracefully and waits, bounded by ctx, for it to
// return; it then returns Run's result (or ctx's error if ctx ended first).
// It may be called any number of times, from any goroutine, before or
// after Run.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stopCh) })
	d.mu.Lock()
	if d.state == stateNew {
		d.state = stateDone
		close(d.done)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.result
	case <-ctx.Done():
		return ctx.Err()
	}
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
