package dispatcher

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/clock"
)

// ListenerState is the state of the LISTEN connection that wakes the
// dispatcher between polls (see Config.Wakeup). Polling delivers every
// event whatever it is; only latency depends on it.
type ListenerState int

const (
	// ListenerOff: no listener (WakeupDisabled, or not running).
	ListenerOff ListenerState = iota
	// ListenerProbing: the listener is connecting and proving that
	// notifications arrive; the dispatcher polls meanwhile.
	ListenerProbing
	// ListenerActive: connected and listening.
	ListenerActive
	// ListenerReconnecting: the connection was lost; reconnecting with
	// backoff, polling meanwhile.
	ListenerReconnecting
	// ListenerUnavailable: the probe failed (WakeupAuto); polling only.
	ListenerUnavailable
)

// String names the state: "off", "probing", "active", "reconnecting" or
// "unavailable".
func (s ListenerState) String() string {
	switch s {
	case ListenerProbing:
		return "probing"
	case ListenerActive:
		return "active"
	case ListenerReconnecting:
		return "reconnecting"
	case ListenerUnavailable:
		return "unavailable"
	}
	return "off"
}

// Health is a snapshot of what readiness and liveness probes judge: Healthy
// gives the verdict, and the fields let a probe judge for itself. Times are
// local. It holds no payloads, event data or error texts (Err is one of
// the dispatcher's sentinels).
type Health struct {
	// State is where the dispatcher is in its life.
	State State
	// Started is when dispatching began; zero before.
	Started time.Time
	// LastClaim is when the latest claim statement succeeded (whether it
	// found events or not); zero before the first. Claims run at least
	// every PollInterval (IdlePollInterval while stretched) while there is
	// room for more events.
	LastClaim time.Time
	// LastPoll is when the coordinator, the loop that decides when to
	// claim, last began a poll cycle; zero before the first. Poll cycles
	// run every PollInterval (stretched up to IdlePollInterval while idle
	// with wake-ups working), busy or idle, with room for events or not.
	LastPoll time.Time
	// PollInterval is the interval between poll cycles in effect.
	PollInterval time.Duration
	// LastCompletion is when the latest write of outcomes succeeded; zero
	// before the first. Writes happen only when events finish, so an idle
	// dispatcher's is old.
	LastCompletion time.Time
	// ClaimErrors counts the claims that failed in a row since the last
	// one that succeeded.
	ClaimErrors int
	// CompletionErrors counts the outcome writes that failed in a row
	// since the last one that succeeded. A write of one event's outcome
	// that the database refuses does not count (the event is retried and
	// given up on its own), and the run ends once no outcome is waiting
	// to be written: each was written, given up or let go.
	CompletionErrors int
	// FailingSince is when the earliest of the current runs of failed
	// claims or failed outcome writes began; zero when the last claim and
	// the last write both succeeded.
	FailingSince time.Time
	// Listener is the state of the wake-up listener.
	Listener ListenerState
	// VerifySkipped is true when the start's schema check
	// (migrations.Verify) ran out of time twice and the dispatcher started
	// without it (Config.SkipVerify, a choice, does not set it). Raise
	// statement_timeout for the dispatcher's role, or set SkipVerify.
	VerifySkipped bool
	// Err is the result of dispatching once State is StateStopped (nil, or
	// ErrDrainTimeout).
	Err error
	// Circuit is the state of the publisher's circuit: open or probing
	// while the publisher reports its destination unavailable. It does
	// not make Healthy fail (see Healthy).
	Circuit CircuitState
	// CircuitOpenSince is when the circuit last left CircuitClosed; zero
	// while it is closed.
	CircuitOpenSince time.Time
	// Overrunning is how many handler or publish calls are running past
	// their timeout now: calls that ignore their cancelled context, each
	// logged at WARN (see Stats.Overruns). OverrunningSince is the
	// earliest of their timeouts; zero when none runs.
	Overrunning      int
	OverrunningSince time.Time
	// OverrunLimit is the number of such calls at which Healthy fails:
	// half of Config.Concurrency, at least 1. Each holds a handler slot
	// that nothing but a restart gives back.
	OverrunLimit int
	// ModeConflicts are the other dispatchers of this table heard with
	// another ordering mode (Ordering, or under PerKey HeadPolicy or
	// OrderScope), oldest first; nil when none (see docs/ordering.md,
	// "Mixed modes"). They do not make Healthy fail: a rolling deploy that
	// changes the mode runs both for a while, and restarting a replica
	// cannot settle it. Alert on Stats.ModeConflicts, or judge it here.
	ModeConflicts []ModeConflict
}

// ErrUnhealthy is matched by the errors Health.Healthy returns.
var ErrUnhealthy = errors.New("pgoutbox: dispatcher unhealthy")

// Healthy returns nil when the dispatcher is running, its claims and
// outcome writes have not kept failing for longer than maxAge (none has
// succeeded since the first failure of the current run, maxAge or more
// ago), and its coordinator is not stalled (it began a poll cycle within
// maxAge plus PollInterval; Started stands for the first). Otherwise it
// returns an error matching ErrUnhealthy that says why.
//
// It fails too while OverrunLimit or more handler or publish calls run past
// their timeout (calls that ignore their cancelled context hold handler
// slots until the process ends: a restart gives them back).
//
// It detects: a database that refuses or fails the dispatcher's claims or
// outcome writes, or does not answer them (they fail when the dispatcher's
// statement timeout, min(LeaseDuration/2, 30s), passes); and a coordinator
// wedged for longer than maxAge (a recovery waiting on a lock, a bug). It
// does not detect a stall of the outcome writer that records no failure
// (an OnOutcome hook that never returns, say): watch Stats.InFlight for
// that. Slow handlers, an idle table, a dispatcher saturated with busy
// handlers and a missing listener (polling delivers) are healthy. Choose
// maxAge above that statement timeout.
//
// An open circuit (a broker outage: see Circuit) is healthy too: the
// dispatcher is doing what it should, spending no attempts and probing,
// and restarting it, or taking it out of a load balancer, cannot bring
// the broker back; it still delivers to its handlers. Alert on Circuit
// and CircuitOpenSince (or the pgoutbox.circuit.state gauge) instead, or
// judge them in the probe.
func (h Health) Healthy(maxAge time.Duration) error {
	switch {
	case h.State != StateRunning:
		return fmt.Errorf("%w: %s", ErrUnhealthy, h.State)
	case !h.FailingSince.IsZero() && clock.Real().Elapsed(h.FailingSince) > maxAge:
		return fmt.Errorf("%w: claims or outcome writes failing since %s (%d claims, %d writes in a row)",
			ErrUnhealthy, h.FailingSince.Format(time.RFC3339), h.ClaimErrors, h.CompletionErrors)
	case h.stalled(maxAge):
		return fmt.Errorf("%w: no poll cycle since %s: the coordinator is stalled",
			ErrUnhealthy, h.lastPollOrStart().Format(time.RFC3339))
	case h.OverrunLimit > 0 && h.Overrunning >= h.OverrunLimit:
		return fmt.Errorf("%w: %d handler or publish calls are running past their timeout (since %s), "+
			"ignoring their cancelled context; %d make it unhealthy", ErrUnhealthy, h.Overrunning,
			h.OverrunningSince.Format(time.RFC3339), h.OverrunLimit)
	}
	return nil
}

// stalled reports whether the coordinator began no poll cycle for longer
// than maxAge plus the poll interval.
func (h Health) stalled(maxAge time.Duration) bool {
	last := h.lastPollOrStart()
	return !last.IsZero() && clock.Real().Elapsed(last) > maxAge+h.PollInterval
}

// lastPollOrStart is LastPoll, or Started before the first poll.
func (h Health) lastPollOrStart() time.Time {
	if h.LastPoll.IsZero() {
		return h.Started
	}
	return h.LastPoll
}

// Health returns a snapshot of the dispatcher's health (see Health.Healthy).
func (d *Dispatcher) Health() Health {
	ls, result := d.life.Snapshot()
	state := State(ls)
	h := d.health.snapshot()
	h.State, h.Err = state, result
	circuitState, since := d.circuit.Snapshot()
	h.Circuit, h.CircuitOpenSince = CircuitState(circuitState), since
	heard, _ := d.greeter.Conflicts()
	h.ModeConflicts = modeConflicts(heard)
	if ns := d.report.Counters.LastPoll.Load(); ns != 0 {
		h.LastPoll = time.Unix(0, ns)
	}
	h.PollInterval = max(time.Duration(d.report.Counters.PollInterval.Load()), d.cfg.PollInterval)
	h.Overrunning, h.OverrunningSince = d.held.Overrunning(d.clock.Mono())
	h.OverrunLimit = d.cfg.overrunLimit()
	if state != StateRunning && state != StateStopping {
		h.Listener = ListenerOff
	}
	return h
}

// healthState is the live state behind Health, under its own lock. Only
// claims and outcome writes update it, once per statement.
type healthState struct {
	clock      clock.Clock // its Mono times the writes (set by New)
	mu         sync.Mutex
	started    time.Time
	claim      runOfWrites
	completion runOfWrites
	listener   ListenerState
	unverified bool
}

// runOfWrites follows one kind of statement: its latest success, and the
// run of failures since.
type runOfWrites struct {
	last, failingSince time.Time
	failures           int
}

func (r *runOfWrites) note(err error, now time.Time) {
	if err == nil {
		r.last, r.failingSince, r.failures = now, time.Time{}, 0
		return
	}
	if r.failures == 0 {
		r.failingSince = now
	}
	r.failures++
}

func (h *healthState) begin(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started = now
}

// claimed notes the end of a claim statement.
func (h *healthState) claimed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.claim.note(err, h.clock.Mono())
}

// completed notes the end of an outcome write.
func (h *healthState) completed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completion.note(err, h.clock.Mono())
}

// completionsSettled ends the run of failed outcome writes once no outcome
// is waiting to be written (each was written, given up or let go): no
// write is failing any more.
func (h *healthState) completionsSettled() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completion.failingSince, h.completion.failures = time.Time{}, 0
}

// skipVerify notes that the start went on without the schema check.
func (h *healthState) skipVerify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unverified = true
}

func (h *healthState) setListener(s ListenerState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listener = s
}

func (h *healthState) snapshot() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Health{
		Started: h.started, LastClaim: h.claim.last, LastCompletion: h.completion.last,
		ClaimErrors: h.claim.failures, CompletionErrors: h.completion.failures, Listener: h.listener,
		FailingSince: h.claim.failingSince, VerifySkipped: h.unverified,
	}
	if f := h.completion.failingSince; !f.IsZero() && (s.FailingSince.IsZero() || f.Before(s.FailingSince)) {
		s.FailingSince = f
	}
	return s
}
