package dispatcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Overruns: the keeper finds the calls running past their timeout, logs
// and counts them (see internal/keeper, overrun.go, for the whole rule);
// the gauge, Health's limit and the DrainTimeoutError are here.

// overrunLimit is how many calls running past their timeout make Health
// unhealthy: half the handler slots, at least one.
func (c Config) overrunLimit() int { return max(1, c.Concurrency/2) }

// RunningEvent is an event whose handler or publish was still running
// when a stop gave up waiting for it (see DrainTimeoutError).
type RunningEvent struct {
	ID      uuid.UUID
	Type    string
	Running time.Duration // how long its call had run
}

// drainListMax is the most events a DrainTimeoutError names.
const drainListMax = 10

// DrainTimeoutError is the error Run, Stop and Err return when handlers
// did not finish within Config.DrainTimeout: it matches ErrDrainTimeout
// and names the events whose calls were still running then, longest
// running first (up to 10 of them; Count says how many in all). A Stop
// whose context ends while a cancelled call still runs (it ignores its
// context) returns one too, naming those still running then, wrapped with
// the context's error.
type DrainTimeoutError struct {
	Running []RunningEvent
	Count   int
}

func (e *DrainTimeoutError) Error() string {
	if e.Count == 0 {
		return ErrDrainTimeout.Error()
	}
	return ErrDrainTimeout.Error() + "; " + runningList(e.Running, e.Count)
}

// runningEvents lists up to limit of the calls running now, oldest first,
// and how many run in all (see held.Set.Running).
func runningEvents(h *held.Set, limit int) (calls []RunningEvent, n int) {
	running, n := h.Running(limit)
	for _, c := range running {
		calls = append(calls, RunningEvent(c))
	}
	return calls, n
}

// runningList names running events: "n still running: id (type, running
// d), ... and m more".
func runningList(running []RunningEvent, count int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d still running:", count)
	for i, r := range running {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (%s, running %s)", r.ID, r.Type, r.Running.Round(time.Millisecond))
	}
	if more := count - len(running); more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	return b.String()
}

// Is makes the error match ErrDrainTimeout.
func (e *DrainTimeoutError) Is(target error) bool { return target == ErrDrainTimeout }

// drainTimedOut is the DrainTimeoutError naming the calls of h running
// now.
func drainTimedOut(h *held.Set) *DrainTimeoutError {
	running, n := runningEvents(h, drainListMax)
	return &DrainTimeoutError{Running: running, Count: n}
}

// stopCutShort is what Stop returns when its ctx ends before the
// dispatcher has stopped: ctx's error, naming the calls still running
// (a DrainTimeoutError once the drain timed out: hardStopped).
func stopCutShort(ctx context.Context, h *held.Set, hardStopped bool) error {
	running, n := runningEvents(h, drainListMax)
	switch {
	case hardStopped:
		return fmt.Errorf("%w: %w", ctx.Err(), &DrainTimeoutError{Running: running, Count: n})
	case n > 0:
		return fmt.Errorf("%w: waiting for the drain; %s", ctx.Err(), runningList(running, n))
	}
	return ctx.Err()
}
