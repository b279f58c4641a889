package report

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
)

// Counters are the live values behind the dispatcher's Stats (whose
// fields of the same names document them). The Metered ones add to their
// OpenTelemetry counter too (see counterNames); the others are counted by
// metrics with attributes of their own, or are not metrics.
type Counters struct {
	Sent, Retried, Snoozed, Failed        atomic.Uint64
	Claimed, LockLost, OutcomeUnknown     Metered
	Recovered, Released, OrderReleased    Metered
	Overruns                              Metered
	RecoveredFailed, Errors               atomic.Uint64
	PollCycles, ClaimCycles               atomic.Uint64
	Wakeups, ListenerConnects, DueWakeups atomic.Uint64
	LastPoll, PollInterval                atomic.Int64
	RetentionSent, RetentionFailed        Metered
	CircuitOpens, OutageReturned          Metered
	RetentionPasses, RetentionSkipped     atomic.Uint64
	Unroutable                            atomic.Uint64
}

// Metered is a Stats counter that adds to an OpenTelemetry counter too.
type Metered struct {
	n     atomic.Uint64       // the Stats counter
	m     metric.Int64Counter // nil until newMetrics attaches one
	attrs []metric.AddOption  // allocated once: a variadic argument escapes
}

// Add adds n to the Stats counter and to its metric, and returns the new
// value of the Stats counter.
func (c *Metered) Add(n uint64) uint64 {
	if c.m != nil {
		c.m.Add(context.Background(), int64(n), c.attrs...)
	}
	return c.n.Add(n)
}

// Load returns the value of the Stats counter.
func (c *Metered) Load() uint64 { return c.n.Load() }
