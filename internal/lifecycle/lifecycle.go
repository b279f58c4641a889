// Package lifecycle is the life the dispatcher and the relay share, so
// that both public packages start and stop alike: new, starting,
// running, stopping, stopped, once. Start and Run move it (Begin, then
// Started; Ended once the work returns), Stop asks for the stop (Stop)
// and waits for Done, Health and Err read it (Snapshot, Err).
//
// The guarantees it keeps for both public packages: a stop before the
// start is a clean stop (Start then returns the owner's ErrStopped, Run
// nil); a start whose checks fail goes back to new and may be tried
// again, unless a stop came meanwhile; a stopped owner never runs again.
// Each owner gives its own ErrRunning and ErrStopped, and converts State
// to its public State, whose values are the same.
//
// Its lock is a leaf: nothing is called under it except the function an
// owner gives IfNew, which must take no lock that is held while this one
// is taken.
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// State is where the owner is in its life. The public State types of the
// dispatcher and the relay have the same values.
type State int

const (
	// StateNew: not started yet, or its start failed (it may start again).
	StateNew State = iota
	// StateStarting: running its start-up checks.
	StateStarting
	// StateRunning: doing its work.
	StateRunning
	// StateStopping: stopped taking work and draining.
	StateStopping
	// StateStopped: it cannot run again.
	StateStopped
)

// String names the state: "new", "starting", "running", "stopping" or
// "stopped" (a value out of range reads "new").
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

// ErrInterrupted is Begin's and Started's error when a stop (the ctx
// ending, or Stop) came before or during the start-up checks. Owners
// never return it to their callers: Start returns ctx's error or
// ErrStopped instead, Run nil.
var ErrInterrupted = errors.New("pgoutbox: start interrupted")

// Life is one owner's life. The zero value is not usable; see New.
type Life struct {
	errRunning, errStopped error

	mu     sync.Mutex
	state  State
	result error // the work's result, once Stopped
	ran    bool  // the work began (a stop before it is a clean stop for Run)

	stopCh   chan struct{} // Stop was called
	stopOnce sync.Once
	done     chan struct{} // stopped: the work ended, or Stop came before a start
}

// New returns the life of a new owner, whose Begin returns errRunning
// while it starts or runs and errStopped once it is stopping or stopped.
func New(errRunning, errStopped error) *Life {
	return &Life{errRunning: errRunning, errStopped: errStopped, stopCh: make(chan struct{}), done: make(chan struct{})}
}

// Begin moves a new owner to starting. One stopped before it started
// gives ErrInterrupted (as a stop during the checks), one stopping or
// stopped after it ran errStopped, one starting or running errRunning.
func (l *Life) Begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case StateNew:
		l.state = StateStarting
		return nil
	case StateStopped:
		if !l.ran {
			return ErrInterrupted
		}
		return l.errStopped
	case StateStopping:
		return l.errStopped
	default:
		return l.errRunning
	}
}

// Started takes the start-up checks' result err: nil moves to running;
// otherwise it goes back to new, unless a stop came meanwhile (then it is
// stopped, and the result is ErrInterrupted: the stop was taken, a failed
// check is no reason to retry).
func (l *Life) Started(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.state, l.ran = StateRunning, true
	case errors.Is(err, ErrInterrupted) || l.StopRequested():
		l.stopped(nil)
		err = ErrInterrupted
	default:
		l.state = StateNew
	}
	return err
}

// Ended records the end of the work and returns its result.
func (l *Life) Ended(result error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped(result)
	return result
}

// stopped records the end; l.mu must be held.
func (l *Life) stopped(result error) {
	l.result, l.state = result, StateStopped
	close(l.done)
}

// SetState records a change of state.
func (l *Life) SetState(s State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = s
}

// Stop asks for the stop: StopRequested is true from now on, and an owner
// not started yet is stopped at once.
func (l *Life) Stop() {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == StateNew {
		l.stopped(nil)
	}
}

// IfNew calls f under the lock when the owner is new, so that no start
// comes between the check and f, and reports whether it did.
func (l *Life) IfNew(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != StateNew {
		return false
	}
	f()
	return true
}

// Snapshot returns the state and the work's result (nil before it
// stopped).
func (l *Life) Snapshot() (State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.result
}

// Err returns the work's result (nil before it stopped).
func (l *Life) Err() error {
	_, result := l.Snapshot()
	return result
}

// Done is closed once the owner stopped: its work ended, or Stop came
// before a start. A start that failed does not close it.
func (l *Life) Done() <-chan struct{} { return l.done }

// StopCh is closed once Stop was called.
func (l *Life) StopCh() <-chan struct{} { return l.stopCh }

// StopRequested reports whether Stop was called.
func (l *Life) StopRequested() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// StoppedStarting reports whether the owner was asked to stop (ctx ended
// or Stop was called) before its work began.
func (l *Life) StoppedStarting(ctx context.Context) bool {
	return ctx.Err() != nil || l.StopRequested()
}

// UntilStop returns a context that ends with ctx or when Stop is called;
// call cancel when done with it.
func (l *Life) UntilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// StopCause says why the work ended, for the stop logs: Stop was called,
// or the context given to Start or Run ended (with its cause, so that a
// short-lived context passed by mistake shows in the log); "unknown"
// otherwise.
func (l *Life) StopCause(ctx context.Context) string {
	if l.StopRequested() {
		return "Stop was called"
	}
	if err := context.Cause(ctx); err != nil {
		return "the context given to Start or Run ended: " + err.Error()
	}
	return "unknown"
}
