package lanes

import (
	"cmp"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config is what the lanes of one consumer group need. Zero fields take
// the defaults named on each; New rejects what is out of range with an
// *outbox.ConfigError. The public relay package validates its own
// options' ranges first; these checks only keep the engine sane.
type Config struct {
	// Publisher receives the events. Required. When it is an
	// outbox.KeyOrderedPublisher reporting true, a key's run of events
	// goes in one call; else one event per key and call (waves).
	Publisher outbox.Publisher
	// Route is an event's destination (topic, subject). Defaults to the
	// event type, as the dispatcher's RouteFunc. An empty destination
	// means the group does not publish the event: it counts as done
	// (Result.Skipped) and holds nothing.
	Route func(outbox.Event) string
	// Lanes is how many lanes publish at once; a key always goes to the
	// same lane. Defaults to 16; 1 to 1024.
	Lanes int
	// MaxPerCall is the most messages one Publisher.Publish call carries.
	// Defaults to 500; 1 to 100000.
	MaxPerCall int
	// KeyRetries is how many times an event that failed transiently is
	// published again before its key is parked. Defaults to 8; 1 to 1000
	// (a publisher that wants no retry marks its errors outbox.Permanent).
	KeyRetries int
	// RetryMin is the wait before the first retry; it doubles after each
	// further failure up to RetryMax (with outbox.Backoff's 10% jitter).
	// Defaults to 100ms and 1m.
	RetryMin, RetryMax time.Duration
	// PublishTimeout bounds each Publisher.Publish call. Defaults to 30s,
	// as the dispatcher's.
	PublishTimeout time.Duration
	// CircuitMinBackoff is how long publishing stops after an outage (a
	// call whose every message reported outbox.ErrUnavailable); each
	// failed probe doubles it up to CircuitMaxBackoff. Default 1s and 1m,
	// as the dispatcher's.
	CircuitMinBackoff, CircuitMaxBackoff time.Duration
	// ProbeSize is the most events the probe of an open circuit carries.
	// Defaults to 1.
	ProbeSize int

	// OnPublish, when set, is called after each Publisher.Publish call
	// with its message count and duration. The hooks are called from the
	// lanes' goroutines, concurrently, and must not call the Lanes.
	OnPublish func(n int, d time.Duration)
	// OnError, when set, is called with a *PublishError for each message
	// whose failure costs something: a retry scheduled or its key parked.
	OnError func(error)
	// OnCircuit, when set, is called with each transition of the circuit
	// and, when it opens, the error of the outage.
	OnCircuit func(ch circuit.Change, cause error)
	// Clock times retries, the circuit and call durations; the zero Clock
	// is the wall clock.
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	if c.Route == nil {
		c.Route = func(e outbox.Event) string { return e.Type }
	}
	c.Lanes = cmp.Or(c.Lanes, 16)
	c.MaxPerCall = cmp.Or(c.MaxPerCall, 500)
	c.KeyRetries = cmp.Or(c.KeyRetries, 8)
	c.RetryMin = cmp.Or(c.RetryMin, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, max(time.Minute, c.RetryMin))
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 30*time.Second)
	c.CircuitMinBackoff = cmp.Or(c.CircuitMinBackoff, time.Second)
	c.CircuitMaxBackoff = cmp.Or(c.CircuitMaxBackoff, max(time.Minute, c.CircuitMinBackoff))
	c.ProbeSize = cmp.Or(c.ProbeSize, 1)
	return c
}

func (c Config) validate() error {
	checks := []struct {
		ok            bool
		field, reason string
	}{
		{c.Publisher != nil, "Publisher", "is required"},
		{between(c.Lanes, 1, 1024), "Lanes", "must be between 1 and 1024"},
		{between(c.MaxPerCall, 1, 100_000), "MaxPerCall", "must be between 1 and 100000"},
		{between(c.KeyRetries, 1, 1000), "KeyRetries", "must be between 1 and 1000"},
		{c.RetryMin > 0, "RetryMin", "must be positive"},
		{c.RetryMax >= c.RetryMin, "RetryMax", "must be at least RetryMin"},
		{c.PublishTimeout > 0, "PublishTimeout", "must be positive"},
		{c.CircuitMinBackoff > 0, "CircuitMinBackoff", "must be positive"},
		{c.CircuitMaxBackoff >= c.CircuitMinBackoff, "CircuitMaxBackoff", "must be at least CircuitMinBackoff"},
		{between(c.ProbeSize, 1, c.MaxPerCall), "ProbeSize", "must be between 1 and MaxPerCall"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return &outbox.ConfigError{Field: ch.field, Reason: ch.reason}
		}
	}
	return nil
}

func between[T cmp.Ordered](v, lo, hi T) bool { return v >= lo && v <= hi }
