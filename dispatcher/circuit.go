package dispatcher

import (
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
func (s CircuitState) String() string { return circuit.State(s).String() }

// newCircuit returns the circuit of a dispatcher of cfg, which wake asks
// for a claim. It times its backoffs by the clock's real time (Mono),
// which Config.now does not replace.
func newCircuit(cfg Config, clk clock.Clock, wake func()) *circuit.Circuit {
	var onChange func(circuit.State)
	if cfg.onCircuit != nil {
		onChange = func(s circuit.State) { cfg.onCircuit(CircuitState(s)) }
	}
	return circuit.New(circuit.Config{MinBackoff: cfg.CircuitMinBackoff, MaxBackoff: cfg.CircuitMaxBackoff,
		ProbeSize: cfg.CircuitProbeSize, WakeFunc: wake, OnChangeFunc: onChange, Clock: clk})
}
