package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lifecycle"
)

// Relay publishes the events of one log table for one consumer group, in
// commit order per key, and moves the group's cursor only after every
// event of a batch was acked or parked. Any number of relays of one group
// may run; one holds the group's lease and publishes, the others wait.
type Relay struct {
	cfg   Config
	clock clock.Clock
	rec   *recorder
	svc   services
	// life is where it is in its life and how it ended: the dispatcher's
	// (internal/lifecycle).
	life *lifecycle.Life

	// hardStop is closed when the drain must end at once: DrainTimeout
	// passed, or the ctx of a Stop call ended.
	hardStop     chan struct{}
	hardStopOnce sync.Once

	mu      sync.Mutex
	started time.Time // when relaying began; zero before
}

// State is where a relay is in its life (see Health).
type State int

// The values are those of internal/lifecycle's State, which the relay
// shares with the dispatcher.
const (
	// StateNew is a relay not started yet, or whose start failed (it may
	// be started again).
	StateNew = State(lifecycle.StateNew)
	// StateStarting is a relay running its start-up checks.
	StateStarting = State(lifecycle.StateStarting)
	// StateRunning is a relay relaying.
	StateRunning = State(lifecycle.StateRunning)
	// StateStopping is a relay finishing the batch in flight and stopping
	// its services.
	StateStopping = State(lifecycle.StateStopping)
	// StateStopped is a relay that stopped: it cannot run again.
	StateStopped = State(lifecycle.StateStopped)
)

// String names the state: "new", "starting", "running", "stopping" or
// "stopped".
func (s State) String() string { return lifecycle.State(s).String() }

// CircuitState is the state of the publisher's circuit.
type CircuitState int

const (
	// CircuitClosed: the publisher is used as usual.
	CircuitClosed = CircuitState(circuit.Closed)
	// CircuitOpen: the last publish found the destination unavailable;
	// publishing pauses, the batch stays in memory, nothing is parked.
	CircuitOpen = CircuitState(circuit.Open)
	// CircuitProbing: the pause ended; a probe of up to CircuitProbeSize
	// events closes or opens the circuit again.
	CircuitProbing = CircuitState(circuit.Probing)
)

// String names the state: "closed", "open" or "probing".
func (s CircuitState) String() string { return circuit.State(s).String() }

// New returns a relay of cfg. It validates cfg and returns an
// *outbox.ConfigError naming the first field out of range. It does not
// touch the database; Start and Run do.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clk := clock.Real()
	r := &Relay{cfg: cfg, clock: clk, rec: newRecorder(cfg, clk), life: lifecycle.New(ErrRunning, ErrStopped), hardStop: make(chan struct{})}
	build := newServices
	if cfg.newServices != nil {
		build = cfg.newServices
	}
	svc, err := build(cfg, r.rec)
	if err != nil {
		return nil, err
	}
	r.svc = svc
	return r, nil
}

// Start runs the start-up checks and, when they pass, relays in the
// background until ctx ends, Stop is called or a service ends with an
// error (the group stopped: a *StopError); then it stops as Run does. It
// returns once relaying has begun, or with the error that kept it from
// starting:
//
//   - a schema that does not match what this version needs
//     (migrations.Verify with outbox.KindLog; set SkipVerify to start
//     without it);
//   - a group that does not exist (ErrNoGroup) or was stopped (a
//     *StopError), a log without head-room for new transactions;
//   - ErrRunning when the relay is starting or running, ErrStopped when
//     it is stopping or stopped;
//   - ctx's error, or ErrStopped, when ctx ends or Stop is called before
//     or during the checks.
//
// A start that fails on its checks leaves the relay as New returned it:
// it may be started again. ctx bounds the checks and relaying both; give
// it the context of the program's life. After Start, Stop returns the
// result of relaying, as do Err once Done is closed, and Health.
func (r *Relay) Start(ctx context.Context) error {
	err := r.start(ctx)
	switch {
	case errors.Is(err, lifecycle.ErrInterrupted):
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrStopped
	case err != nil:
		return err
	}
	go func() { _ = r.life.Ended(r.run(ctx)) }() // its result reaches Stop, Err and Health
	return nil
}

// Run is Start followed by a wait for the end: it runs the start-up
// checks, relays until ctx ends, Stop is called or a service ends with an
// error, then lets the batch in flight finish (within DrainTimeout, or
// until the ctx of a Stop call ends), stops the services in reverse order
// and returns. It returns nil after a clean stop, ErrDrainTimeout when the
// batch in flight had to be cancelled, the error of the service that ended
// relaying (a *StopError when the group stopped), or the error that kept
// it from starting (see Start). A stop before Run or during its checks is
// a clean stop: Run returns nil.
func (r *Relay) Run(ctx context.Context) error {
	err := r.start(ctx)
	switch {
	case errors.Is(err, lifecycle.ErrInterrupted):
		return nil
	case err != nil:
		return err
	}
	return r.life.Ended(r.run(ctx))
}

// start moves a new relay to starting and runs the start-up checks.
func (r *Relay) start(ctx context.Context) error {
	if err := r.life.Begin(); err != nil {
		return err
	}
	err := r.startUp(ctx)
	if err == nil && (ctx.Err() != nil || r.life.StopRequested()) {
		err = lifecycle.ErrInterrupted
	}
	if err == nil {
		r.mu.Lock()
		r.started = r.clock.Now()
		r.mu.Unlock()
	}
	return r.life.Started(err)
}

// startUp runs the start-up checks under a context that ends with ctx or
// when Stop is called; a stop or a cancelled ctx meanwhile gives
// lifecycle.ErrInterrupted.
func (r *Relay) startUp(ctx context.Context) error {
	ctx, cancel := r.life.UntilStop(ctx)
	defer cancel()
	var err error
	if r.svc.verify != nil && !r.cfg.SkipVerify {
		err = r.svc.verify(ctx)
	}
	if err == nil && r.svc.check != nil {
		err = r.svc.check(ctx)
	}
	if ctx.Err() != nil {
		return lifecycle.ErrInterrupted
	}
	return err
}

// Stop asks the relay to stop and waits, bounded by ctx, for it to end:
// the batch in flight finishes (its events acked or parked, the cursor
// moved), then the services stop in reverse order of their start. When
// ctx ends first, the batch in flight is cancelled (its events are
// published again by the group's next holder) and Stop returns ctx's
// error. Otherwise it returns the result of relaying (see Run). It may be
// called any number of times, from any goroutine, before or after Start
// or Run: before, it stops the relay (Start then returns ErrStopped, Run
// nil).
func (r *Relay) Stop(ctx context.Context) error {
	r.life.Stop()
	select {
	case <-r.life.Done():
		return r.Err()
	case <-ctx.Done():
		r.cut()
		return ctx.Err()
	}
}

// cut ends the drain at once.
func (r *Relay) cut() { r.hardStopOnce.Do(func() { close(r.hardStop) }) }

// Done returns a channel that is closed when the relay has stopped:
// relaying ended, or Stop came before a start. A start that failed does
// not close it.
func (r *Relay) Done() <-chan struct{} { return r.life.Done() }

// Err returns the result of relaying once Done is closed (see Run); nil
// before.
func (r *Relay) Err() error { return r.life.Err() }
