package dispatcher

import (
	"errors"
	"fmt"
	"sync"
	"time"
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
	// Err is the result of dispatching once State is StateStopped (nil, or
	// ErrDrainTimeout).
	Err error
}

// ErrUnhealthy is matched by the errors Health.Healthy returns.
var ErrUnhealthy = errors.New("pgoutbox: dispatcher unhealthy")

// Healthy returns nil when the dispatcher is running and neither its claims
// nor its outcome writes have kept failing for longer than maxAge (none
// has succeeded since the first failure of the current run, maxAge or
// more ago). Otherwise it returns an error matching ErrUnhealthy that says
// why. Slow handlers, an idle table and a missing listener (polling
// delivers) are healthy. Choose maxAge above PollInterval and the
// dispatcher's own statement timeout, min(LeaseDuration/2, 30s): a claim
// against a database that does not answer fails only when that timeout
// passes.
func (h Health) Healthy(maxAge time.Duration) error {
	switch {
	case h.State != StateRunning:
		return fmt.Errorf("%w: %s", ErrUnhealthy, h.State)
	case !h.FailingSince.IsZero() && time.Since(h.FailingSince) > maxAge:
		return fmt.Errorf("%w: claims or outcome writes failing since %s (%d claims, %d writes in a row)",
			ErrUnhealthy, h.FailingSince.Format(time.RFC3339), h.ClaimErrors, h.CompletionErrors)
	}
	return nil
}

// Health returns a snapshot of the dispatcher's health (see Health.Healthy).
func (d *Dispatcher) Health() Health {
	d.mu.Lock()
	state, result := d.state, d.result
	d.mu.Unlock()
	h := d.health.snapshot()
	h.State, h.Err = state, result
	if state != StateRunning && state != StateStopping {
		h.Listener = ListenerOff
	}
	return h
}

// healthState is the live state behind Health, under its own lock. Only
// claims and outcome writes update it, once per statement.
type healthState struct {
	mu         sync.Mutex
	started    time.Time
	claim      runOfWrites
	completion runOfWrites
	listener   ListenerState
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
	h.claim.note(err, time.Now())
}

// completed notes the end of an outcome write.
func (h *healthState) completed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completion.note(err, time.Now())
}

// completionsSettled ends the run of failed outcome writes once no outcome
// is waiting to be written (each was written, given up or let go): no
// write is failing any more.
func (h *healthState) completionsSettled() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completion.failingSince, h.completion.failures = time.Time{}, 0
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
		FailingSince: h.claim.failingSince,
	}
	if f := h.completion.failingSince; !f.IsZero() && (s.FailingSince.IsZero() || f.Before(s.FailingSince)) {
		s.FailingSince = f
	}
	return s
}
