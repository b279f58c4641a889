package relay

import (
	"context"
	"errors"
	"sync"
)

// life is where a relay is in its life (State) and how it ended: new,
// starting, running, stopping, stopped, once. Start and Run move it
// (begin, then started; ended once relaying returns), Stop asks for the
// stop (stop) and waits for done, Health and Err read it. It mirrors the
// dispatcher's (dispatcher/life.go), whose State and errors are its own.
//
// Its lock is a leaf: nothing is called under it.
type life struct {
	mu     sync.Mutex
	state  State
	result error // relaying's result, once StateStopped
	ran    bool  // relaying began (a stop before it is a clean stop for Run)

	stopCh   chan struct{} // Stop was called
	stopOnce sync.Once
	done     chan struct{} // stopped: relaying ended, or Stop came before a start
}

// errInterrupted is start's error when a stop (ctx ending, or Stop)
// interrupted the start-up checks.
var errInterrupted = errors.New("pgoutbox: relay start interrupted")

func newLife() *life {
	return &life{stopCh: make(chan struct{}), done: make(chan struct{})}
}

// begin moves a new relay to starting. A relay stopped before it started
// gives errInterrupted (as a stop during the checks), one stopping or
// stopped after it ran ErrStopped, one starting or running ErrRunning.
func (l *life) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case StateNew:
		l.state = StateStarting
		return nil
	case StateStopped:
		if !l.ran {
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
// stopped, and the result is errInterrupted).
func (l *life) started(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.state, l.ran = StateRunning, true
	case errors.Is(err, errInterrupted) || l.stopRequested():
		l.stopped(nil)
		err = errInterrupted
	default:
		l.state = StateNew
	}
	return err
}

// ended records the end of relaying and returns its result.
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

// stop asks for the stop; a relay not started yet is stopped at once.
func (l *life) stop() {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == StateNew {
		l.stopped(nil)
	}
}

// snapshot returns the state and the result of relaying (nil before it
// stopped).
func (l *life) snapshot() (State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.result
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

// stopCause says why relaying ended, for the stop logs.
func (l *life) stopCause(ctx context.Context) string {
	if l.stopRequested() {
		return "Stop was called"
	}
	if err := context.Cause(ctx); err != nil {
		return "the context given to Start or Run ended: " + err.Error()
	}
	return "a service ended"
}
