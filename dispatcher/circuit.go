package dispatcher

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
)

// The publisher's circuit: its rules (what an outage is, what is held
// back while it is open, the probe) are in internal/run/circuit.go, where
// each publish call is judged; internal/circuit keeps its state.

// CircuitState is the state of the publisher's circuit.
type CircuitState int

// The values are those of internal/circuit's State, which implements the
// circuit; the dispatcher converts at the boundary.
const (
	// CircuitClosed: the publisher is used as usual (also a dispatcher
	// without a Publisher).
	CircuitClosed = CircuitState(circuit.Closed)
	// CircuitOpen: the last publish found the destination unavailable;
	// nothing that needs the publisher is claimed until the backoff ends.
	CircuitOpen = CircuitState(circuit.Open)
	// CircuitProbing: the backoff ended; one small claim (the probe) may
	// go through, and its publish closes or opens the circuit.
	CircuitProbing = CircuitState(circuit.Probing)
)

// String names the state: "closed", "open" or "probing".
func (s CircuitState) String() string {
	switch s {
	case CircuitOpen:
		return "open"
	case CircuitProbing:
		return "probing"
	}
	return "closed"
}

// newCircuit returns the circuit of a dispatcher of cfg, which wake asks
// for a claim. It reads the wall clock, as it always has (Config.now
// replaces only the lease deadlines' clock).
func newCircuit(cfg Config, wake func()) *circuit.Circuit {
	var onChange func(circuit.State)
	if cfg.onCircuit != nil {
		onChange = func(s circuit.State) { cfg.onCircuit(CircuitState(s)) }
	}
	return circuit.New(circuit.Config{MinBackoff: cfg.CircuitMinBackoff, MaxBackoff: cfg.CircuitMaxBackoff,
		ProbeSize: cfg.CircuitProbeSize, WakeFunc: wake, OnChangeFunc: onChange, Clock: clock.Real()})
}

// circuitTypes is what the circuit needs of the claimed types.
func (k *kinds) circuitTypes() circuit.Types {
	return circuit.Types{Claim: k.claimTypes(), Published: k.publishedTypes(), HandlerOnly: k.handlerOnlyTypes()}
}

// publishedTypes is the types a probe claims: those of PublishTypes that
// the dispatcher claims, or nil (every type) for a catch-all.
func (k *kinds) publishedTypes() []string {
	if k.all || k.publish == nil {
		return nil
	}
	var types []string
	for _, t := range k.types {
		if k.publish[t] {
			types = append(types, t)
		}
	}
	return types
}

// handlerOnlyTypes is the claimed types that never need the publisher:
// none for a catch-all (it cannot claim "every type but these").
func (k *kinds) handlerOnlyTypes() []string {
	if k.all {
		return nil
	}
	var types []string
	for _, t := range k.types {
		if !k.publish[t] {
			types = append(types, t)
		}
	}
	return types
}

// probeClaimed follows a probe claim: one that claimed nothing ends at
// once; otherwise the probe ends when its batch does (every event let
// go), unless a publish decided first.
func (d *Dispatcher) probeClaimed(p circuit.Plan, batch context.Context) {
	if p.Probe == 0 {
		return
	}
	if batch == nil {
		d.circuit.ProbeEnded(p.Probe, false)
		return
	}
	context.AfterFunc(batch, func() { d.circuit.ProbeEnded(p.Probe, true) })
}
