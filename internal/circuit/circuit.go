package circuit

import (
	"errors"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// State is the state of the circuit; the dispatcher's public CircuitState
// has the same values.
type State int

const (
	// Closed: the publisher is used as usual.
	Closed State = iota
	// Open: the last publish found the destination unavailable; nothing
	// that needs the publisher is claimed until the backoff ends.
	Open
	// Probing: the backoff ended; one small claim (the probe) may go
	// through, and its publish closes or opens the circuit.
	Probing
)

// String names the state: "closed", "open" or "probing" (a value out of
// range reads "closed").
func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case Probing:
		return "probing"
	}
	return "closed"
}

// Circuit is the publisher's circuit state, under its own lock (a leaf:
// nothing else is locked or called while it is held, but the test hook).
type Circuit struct {
	min, max  time.Duration
	probeSize int
	wake      func()      // asks for a claim (Dispatcher.Trigger)
	onChange  func(State) // test hook, called under mu
	clock     clock.Clock

	mu        sync.Mutex
	state     State
	backoff   time.Duration // of the current opening
	reopenAt  time.Time     // when an open circuit starts probing
	openSince time.Time     // when it left Closed; zero while closed
	probing   bool          // a probe claim is out
	probeID   uint64        // the latest probe
	timer     *time.Timer   // wakes the coordinator at reopenAt
}

// Config is what a Circuit needs from the dispatcher.
type Config struct {
	// MinBackoff is how long the circuit first stays open
	// (CircuitMinBackoff); MaxBackoff bounds the doubling after failed
	// probes (CircuitMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// ProbeSize is the most events a probe claims (CircuitProbeSize).
	ProbeSize int
	// WakeFunc asks for a claim (Dispatcher.Trigger): when the backoff
	// ends, and when a probe that found nothing to publish asks for
	// another.
	WakeFunc func()
	// OnChangeFunc, when set, is called with each new state, under the
	// circuit's lock, in order (a test hook: it must not call the
	// circuit).
	OnChangeFunc func(State)
	// Clock times the backoff by its real time (Mono); the zero Clock is
	// the wall clock.
	Clock clock.Clock
}

// New returns a closed Circuit for cfg.
func New(cfg Config) *Circuit {
	return &Circuit{min: cfg.MinBackoff, max: cfg.MaxBackoff, probeSize: cfg.ProbeSize,
		wake: cfg.WakeFunc, onChange: cfg.OnChangeFunc, clock: cfg.Clock}
}

// Types is what the dispatcher claims, as the circuit needs it.
type Types struct {
	// Claim is the types of a claim while the circuit is closed: nil
	// for every type.
	Claim []string
	// Published is the types a probe claims: those of PublishTypes that
	// the dispatcher claims, or nil (every type) for a catch-all.
	Published []string
	// HandlerOnly is the claimed types that never need the publisher,
	// which are claimed while the circuit is open: none for a catch-all
	// (it cannot claim "every type but these").
	HandlerOnly []string
}

// Plan is what the next claim takes.
type Plan struct {
	Types []string // nil: every type
	Limit int
	Probe uint64 // non-zero: this claim is that probe
}

// Plan returns the next claim of at most limit events of types, and false
// when the circuit allows none.
func (c *Circuit) Plan(types Types, limit int) (Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == Open && !c.clock.Mono().Before(c.reopenAt) {
		c.setLocked(Probing)
		c.probing = false
	}
	switch {
	case c.state == Closed:
		return Plan{Types: types.Claim, Limit: limit}, true
	case c.state == Probing && !c.probing:
		c.probing = true
		c.probeID++
		return Plan{Types: types.Published, Limit: min(limit, c.probeSize), Probe: c.probeID}, true
	}
	return Plan{Types: types.HandlerOnly, Limit: limit}, len(types.HandlerOnly) > 0
}

// DueTypes is the types whose next due time matters now (see the
// dispatcher's armDue), and false when none does: the circuit allows no
// claim.
func (c *Circuit) DueTypes(types Types) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == Closed {
		return types.Claim, true
	}
	return types.HandlerOnly, len(types.HandlerOnly) > 0
}

// ProbeEnded notes that the probe id ended without a verdict (it claimed
// nothing, or its events ended without a publish), so that the next
// wake-up may send another; with again, it asks for that wake-up now. A
// probe that claimed nothing waits for the next poll or wake-up instead,
// so that a table with nothing to publish is not claimed in a loop.
func (c *Circuit) ProbeEnded(id uint64, again bool) {
	c.mu.Lock()
	ended := c.state == Probing && c.probing && c.probeID == id
	if ended {
		c.probing = false
	}
	c.mu.Unlock()
	if ended && again {
		c.wake()
	}
}

// Change is a transition of the circuit, for the reporter.
type Change struct {
	To      State
	From    State
	Backoff time.Duration // of the opening; zero when it closed
	Since   time.Time     // when it opened
}

// Outage opens the circuit after a publish found the destination
// unavailable: from closed with MinBackoff, after a failed probe
// with twice the last backoff. A circuit open already stays as it is (a
// call that began before it opened). It returns the change, if any.
func (c *Circuit) Outage() (Change, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.state
	switch from {
	case Open:
		return Change{}, false
	case Closed:
		c.backoff, c.openSince = c.min, c.clock.Mono()
	default:
		c.backoff = min(2*c.backoff, c.max)
	}
	c.probing = false
	c.reopenAt = c.clock.Mono().Add(c.backoff)
	c.setLocked(Open)
	if c.timer == nil {
		c.timer = c.clock.AfterFunc(c.backoff, c.wake)
	} else {
		c.timer.Reset(c.backoff)
	}
	return Change{To: Open, From: from, Backoff: c.backoff, Since: c.openSince}, true
}

// Reachable closes the circuit after a publish reached the destination.
func (c *Circuit) Reachable() (Change, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == Closed {
		return Change{}, false
	}
	change := Change{To: Closed, From: c.state, Since: c.openSince}
	c.probing, c.openSince = false, time.Time{}
	c.setLocked(Closed)
	if c.timer != nil {
		c.timer.Stop()
	}
	return change, true
}

func (c *Circuit) setLocked(s State) {
	c.state = s
	if c.onChange != nil {
		c.onChange(s)
	}
}

// IsOpen reports whether the circuit is open (not probing).
func (c *Circuit) IsOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == Open
}

// Snapshot returns the state and when the circuit opened (zero while
// closed).
func (c *Circuit) Snapshot() (State, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.openSince
}

// Stop stops the backoff timer.
func (c *Circuit) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}

// Verdict reads the errors of one publish call: an outage when every
// message the publisher attempted failed unavailable
// (outbox.IsUnavailable; cause is one of them), reached when one
// succeeded or failed for another reason, neither when nothing was
// attempted. outbox.ErrNotAttempted (a key-ordered publisher's later
// message of a key that failed) says nothing either way. The
// dispatcher (internal/run) and the relay's lanes judge their calls with
// it, so both open and close their circuits alike.
func Verdict(errs []error) (outage, reached bool, cause error) {
	for _, err := range errs {
		switch {
		case errors.Is(err, outbox.ErrNotAttempted):
		case !outbox.IsUnavailable(err):
			return false, true, nil
		default:
			cause = err
		}
	}
	return cause != nil, false, cause
}
