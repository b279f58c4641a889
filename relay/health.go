package relay

import (
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Health is a snapshot of what readiness and liveness probes judge:
// Healthy gives the verdict, Degraded lists what needs an operator's eye,
// and the fields let a probe judge for itself. Times are local. It holds
// no payloads or event data.
type Health struct {
	// State is where the relay is in its life.
	State State
	// Started is when relaying began; zero before.
	Started time.Time
	// LastBatch is when this relay last recorded a batch (its cursor
	// moved); zero before the first.
	LastBatch time.Time
	// LastTick is when this relay's ticker last recorded a tick; zero
	// when it made none (NoTicker, or another replica holds the ticker).
	LastTick time.Time
	// TickerHeld is true while this relay holds the ticker's lease.
	TickerHeld bool
	// GroupHeld is true while this relay holds its group's lease (it is
	// the one publishing for the group).
	GroupHeld bool
	// StoppedGroup and StopReason say which group stopped and why (see
	// StopError); empty while the group runs.
	StoppedGroup, StopReason string
	// Circuit is the state of the publisher's circuit; CircuitOpenSince
	// when it last left CircuitClosed (zero while closed).
	Circuit          CircuitState
	CircuitOpenSince time.Time
	// LagEvents, LagSeconds and TickAge are the last lag sample (see the
	// gauges pgoutbox.relay.lag.events, .lag.seconds, .tick.age), taken
	// at SampledAt (zero before the first, every second while running).
	LagEvents  int64
	LagSeconds float64
	TickAge    time.Duration
	SampledAt  time.Time
	// KeysParked is the group's parked keys in the last sample.
	KeysParked int64
	// SampleErrors counts the lag samples that failed in a row since
	// FailingSince (zero after one that succeeded): the database does not
	// answer the relay, or refuses it.
	SampleErrors int
	FailingSince time.Time
	// HeadroomXids is how many transaction ids the log's attached parts
	// still hold above the current one, as retention last found it;
	// HeadroomKnown is false before.
	HeadroomXids  uint64
	HeadroomKnown bool
	// Degraded lists, in words, what needs an operator's eye: the tick
	// age over 10×TickInterval while events wait, the group stopped, the
	// circuit open, the head-room under LowHeadroomXids. Nil when none.
	Degraded []string
	// Err is the result of relaying once State is StateStopped.
	Err error
}

// LowHeadroomXids is the head-room under which Health reports the log
// degraded: 4 parts, a quarter of the 16 parts migrations create ahead.
// An insert beyond the last part fails (the log has no default
// partition); add parts with outboxctl relay parts --add.
const LowHeadroomXids = 4 * sqlname.LogPartXids

// Healthy returns nil when the relay is running, its group has not
// stopped, and its reads of the database (the lag sample, every second)
// have not kept failing for longer than maxAge; otherwise an error
// matching ErrUnhealthy that says why. A degraded relay (see Degraded) is
// healthy: an open circuit, a late ticker or low head-room are not cured
// by a restart; alert on Degraded or the gauges instead.
func (h Health) Healthy(maxAge time.Duration) error {
	switch {
	case h.StoppedGroup != "":
		return fmt.Errorf("%w: group %q stopped: %s", ErrUnhealthy, h.StoppedGroup, h.StopReason)
	case h.State != StateRunning:
		return fmt.Errorf("%w: %s", ErrUnhealthy, h.State)
	case !h.FailingSince.IsZero() && clock.Real().Elapsed(h.FailingSince) > maxAge:
		return fmt.Errorf("%w: database reads failing since %s (%d in a row)",
			ErrUnhealthy, h.FailingSince.Format(time.RFC3339), h.SampleErrors)
	}
	return nil
}

// Health returns a snapshot of the relay's health (see Health.Healthy).
func (r *Relay) Health() Health {
	state, result := r.life.Snapshot()
	h := r.rec.health()
	h.State, h.Err = State(state), result
	r.mu.Lock()
	h.Started = r.started
	r.mu.Unlock()
	if h.State == StateRunning || h.State == StateStopping {
		h.TickerHeld = call(r.svc.tickerHeld)
		h.GroupHeld = call(r.svc.groupHeld)
	}
	if r.svc.circuit != nil {
		s, since := r.svc.circuit()
		h.Circuit, h.CircuitOpenSince = CircuitState(s), since
	}
	h.Degraded = degraded(h, r.cfg.TickInterval)
	return h
}

// degraded lists what needs an operator's eye in h.
func degraded(h Health, tickInterval time.Duration) []string {
	var out []string
	if !h.SampledAt.IsZero() && h.LagEvents > 0 && h.TickAge > 10*tickInterval {
		out = append(out, fmt.Sprintf("no tick for %s with %d events waiting (no ticker running?)",
			h.TickAge.Round(time.Millisecond), h.LagEvents))
	}
	if h.StoppedGroup != "" {
		out = append(out, fmt.Sprintf("group %q stopped: %s", h.StoppedGroup, h.StopReason))
	}
	if h.Circuit != CircuitClosed {
		out = append(out, fmt.Sprintf("circuit %s since %s: the publisher's destination is unavailable",
			h.Circuit, h.CircuitOpenSince.Format(time.RFC3339)))
	}
	if h.HeadroomKnown && h.HeadroomXids < LowHeadroomXids {
		out = append(out, fmt.Sprintf("log head-room is %d transaction ids: add parts", h.HeadroomXids))
	}
	return out
}

// health is the recorder's part of Health, copied under its lock.
func (r *recorder) health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := Health{
		LastBatch: r.lastBatch, LastTick: r.lastTick,
		LagEvents: r.lastSample.LagEvents, LagSeconds: r.lastSample.LagSeconds, TickAge: r.lastSample.TickAge,
		KeysParked: r.lastSample.KeysParked, SampledAt: r.sampledAt,
		SampleErrors: r.sampleFailures, FailingSince: r.sampleFailingSince,
		HeadroomXids: r.headroom, HeadroomKnown: r.headroomKnown,
	}
	if r.stopped != nil {
		h.StoppedGroup, h.StopReason = r.stopped.Group, r.stopped.Reason
	}
	return h
}

// call returns f(), false for a nil f.
func call(f func() bool) bool { return f != nil && f() }
