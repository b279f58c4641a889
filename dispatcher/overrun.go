package dispatcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Overruns. A handler (or a publish) that runs past its timeout has had
// its context cancelled; one that ignores it keeps running, and nothing
// can stop it. The dispatcher makes it visible and keeps it from holding
// its event:
//
//   - the heartbeat finds it within a beat (LeaseDuration/3) of its
//     timeout and logs a WARN naming the event, its type and how long
//     the call has run, and again LeaseDuration later, then at doubling
//     intervals up to warnMax, for as long as it runs;
//   - Stats.Overrunning counts the calls running past their timeout now,
//     Stats.Overruns (and the pgoutbox.events.overrun counter) every call
//     found so, and Health reports them: Healthy fails while half the
//     handler slots (at least one) are held by such calls;
//   - the heartbeat renews no call past its timeout: its lease runs out
//     (the local deadline passes first, cancelling the call's context
//     with outbox.ErrLockLost), recovery returns the event to PENDING,
//     and this dispatcher's claims leave it out while the call still runs
//     (lease.ClaimParams.Skip), so that another replica delivers it. The
//     stuck call is abandoned: if it ever returns, its outcome is fenced
//     out and reported as outbox.ErrLockLost. That is the at-least-once
//     price: the other replica runs the event while the stuck call may
//     still be running.
//   - the events of its batch (under PerKey, of its wave) whose handler
//     succeeded and that wait for the batch's publish, which waits for
//     the stuck call, are no longer renewed either (phaseAwaitPublish):
//     they go to another replica the same way, their handlers run again
//     there, rather than being held for as long as the call runs; and
//     under PerKey the batch's later waves, which wait for the stuck
//     one, are let go unstarted and uncharged at their local deadline.
//
// A call with no timeout (NoHandlerTimeout) is never an overrun, and is
// renewed for as long as it runs.

// warnMax is the longest wait between two WARNs of one overrun.
const warnMax = time.Hour

// watchOverruns logs the overruns whose WARN is due and counts the new
// ones. The heartbeat calls it before each beat.
func (d *Dispatcher) watchOverruns() {
	due := d.held.Overruns(time.Now(), d.cfg.LeaseDuration, max(warnMax, d.cfg.LeaseDuration))
	for _, c := range due {
		if c.First {
			d.report.Counters.Overruns.Add(1)
		}
		d.cfg.Logger.Warn("pgoutbox: a "+c.Phase+" is running past its timeout and ignores its cancelled context; "+
			"its lease is no longer renewed, so that another replica delivers the event",
			"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "event_id", c.ID, "event_type", c.EventType, "call", c.Phase,
			"running", c.Running.Round(time.Millisecond), "past_timeout", c.Over.Round(time.Millisecond))
	}
}

// observeOverruns registers the gauge of the calls running past their
// timeout now (pgoutbox.handlers.overrunning), and returns its
// unregistration.
func (d *Dispatcher) observeOverruns() (unregister func()) {
	return d.report.ObserveGauge("pgoutbox.handlers.overrunning", "{call}",
		"Handler and publish calls running past their timeout now, ignoring their cancelled context",
		func() int64 { n, _ := d.held.Overrunning(time.Now()); return int64(n) })
}

// overrunLimit is how many calls running past their timeout make Health
// unhealthy: half the handler slots, at least one.
func (d *Dispatcher) overrunLimit() int { return max(1, d.cfg.Concurrency/2) }

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

// running lists up to limit of the calls running now, oldest first, and
// how many run in all (see held.Set.Running).
func (d *Dispatcher) running(limit int) (calls []RunningEvent, n int) {
	running, n := d.held.Running(limit)
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

// drainTimedOut is the DrainTimeoutError naming the calls running now.
func (d *Dispatcher) drainTimedOut() *DrainTimeoutError {
	running, n := d.running(drainListMax)
	return &DrainTimeoutError{Running: running, Count: n}
}

// stopCutShort is what Stop returns when its ctx ends before the
// dispatcher has stopped: ctx's error, naming the calls still running
// (a DrainTimeoutError once the drain timed out).
func (d *Dispatcher) stopCutShort(ctx context.Context) error {
	running, n := d.running(drainListMax)
	switch {
	case d.hardStopped.Load():
		return fmt.Errorf("%w: %w", ctx.Err(), &DrainTimeoutError{Running: running, Count: n})
	case n > 0:
		return fmt.Errorf("%w: waiting for the drain; %s", ctx.Err(), runningList(running, n))
	}
	return ctx.Err()
}
