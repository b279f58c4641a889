// Package circuit is the state machine of the publisher's circuit: closed,
// open for a backoff after a publish found the destination unavailable,
// then probing with one small claim whose publish closes it or opens it
// again with twice the backoff (up to MaxBackoff).
//
//	Closed --Outage--> Open --backoff ends (Plan)--> Probing
//	   ^                 ^                              |
//	   |                 +-----------Outage-------------+
//	   +--------------------Reachable-------------------+
//
// The design of the circuit as a whole (which calls count as an outage,
// what happens to events claimed before it opened, AtMostOnce) is in
// internal/run/circuit.go, which holds the glue that judges publish calls
// and reports transitions. This package decides only what the next claim
// takes (Plan, DueTypes: all claimed types while closed, a probe of the
// published ones, the handler-only ones while open) from the types it is
// given, and when the backoff ends; Verdict reads a publish call's errors
// (outage, reached or neither) for both the dispatcher and the relay's
// lanes (internal/relay/lanes).
//
// Inputs: Config (the dispatcher's CircuitMinBackoff, CircuitMaxBackoff
// and CircuitProbeSize, its Trigger as WakeFunc, a test hook, the clock)
// and, per call, the claimed types (Types). Callers: the claim coordinator
// (Plan, DueTypes), the publish step (Outage, Reachable, IsOpen), the end
// of a probe's batch (ProbeEnded), Health and Stats (Snapshot), Run (Stop).
//
// Its lock is a leaf: nothing else is locked or called while it is held,
// but OnChangeFunc. WakeFunc runs outside it (from a timer, or after the
// lock is released).
package circuit
