package dispatcher

import (
	"context"
	"errors"
	"sync"
)

// life is where a dispatcher is in its life (State) and how it ended:
// new, starting, running, stopping, stopped, once. Start and Run move it
// (begin, then started; ended once dispatching returns), Stop asks for
// the stop (stop) and waits for done, Health and Err read it.
//
// Its lock is a leaf: nothing is called under it except the function
// Handle gives ifNew, which takes no lock. Handle holds Dispatcher.mu
// while it takes this lock (Dispatcher.mu, then life.mu), never the
// other way round.
type life struct {
	mu     sync.Mutex
	state  State
	result error // dispatching's result, once StateStopped
	ran    bool  // dispatching began (a stop before it is a clean stop for Run)

	stopCh   chan struct{} // Stop was called
	stopOnce sync.Once
	done     chan struct{} // stopped: dispatching ended, or Stop came before a start
}

// newLife returns the life of a new dispatcher.
func newLife() *life {
	return &life{stopCh: make(chan struct{}), done: make(chan struct{})}
}

// begin moves a new dispatcher to starting. A dispatcher stopped before
// it started gives errInterrupted (as a stop during the checks), one
// stopping or stopped after it ran ErrStopped, one starting or running
// ErrRunning.
func (l *life) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case StateNew:
		l.state = StateStarting
		return nil
	case StateStopped:
		if !l.ran { // stopped before it started: as a stop during the checks
			return errInterrupted
		}
		return ErrStopped
	case StateStopping:
		return ErrStopped
	default:
		return ErrRunning
	}
}

// started takes the start-up checks' result err: nil moves to running;
// otherwise it goes back to new, unless a stop came meanwhile (then it is
// stopped, and the result is errInterrupted: the stop was taken, a failed
// check is no reason to retry).
func (l *life) started(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.state, l.ran = StateRunning, true
	case errors.Is(err, errInterrupted) || l.stopRequested():
		l.stopped(nil)
		err = errInterrupted // the stop was taken: a failed check is no reason to retry
	default:
		l.state = StateNew
	}
	return err
}

// ended records the end of dispatching and returns its result.
func (l *life) ended(result error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped(result)
	return result
}

// stopped records the end; l.mu must be held.
func (l *life) stopped(result error) {
	l.result, l.state = result, StateStopped
	close(l.done)
}

// setState records a change of state.
func (l *life) setState(s State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = s
}

// stop asks for the stop: once Stop was called, stopRequested is true; a
// dispatcher not started yet is stopped at once.
func (l *life) stop() {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == StateNew {
		l.stopped(nil)
	}
}

// ifNew calls f under the lock when the dispatcher is new, so that no
// start comes between the check and f, and reports whether it did.
func (l *life) ifNew(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != StateNew {
		return false
	}
	f()
	return true
}

// snapshot returns the state and the result of dispatching (nil before
// it stopped).
func (l *life) snapshot() (State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.result
}

// err returns the result of dispatching (nil before it stopped).
func (l *life) err() error {
	_, result := l.snapshot()
	return result
}

// stopRequested reports whether Stop was called.
func (l *life) stopRequested() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// stoppedStarting reports whether the dispatcher was asked to stop (ctx ended or Stop
// was called) before it started dispatching.
func (l *life) stoppedStarting(ctx context.Context) bool {
	return ctx.Err() != nil || l.stopRequested()
}

// untilStop returns a context that ends with ctx or when Stop is called;
// call cancel when done with it.
func (l *life) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
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

// stopCause says why dispatching ended, for the stop logs: Stop was
// called, or the context given to Start or Run ended (with its cause, so
// that a short-lived context passed by mistake shows in the log).
func (l *life) stopCause(ctx context.Context) string {
	if l.stopRequested() {
		return "Stop was called"
	}
	if err := context.Cause(ctx); err != nil {
		return "the context given to Start or Run ended: " + err.Error()
	}
	return "unknown"
}
