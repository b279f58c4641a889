package dispatcher

import (
	"context"
	"errors"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The publisher's circuit. A publisher reports an outage by wrapping its
// errors with outbox.Unavailable; the dispatcher judges each Publish call:
//
//   - an outage: every message of the call failed, each with an error that
//     matches outbox.ErrUnavailable and none marked permanent (a
//     key-ordered publisher's outbox.ErrNotAttempted counts for neither). The events
//     go back to PENDING as they were (due time, attempts, attempt log and
//     recoveries unchanged: the release path of a stop), and the circuit
//     opens;
//   - reachable: at least one message succeeded or failed for another
//     reason. Failed messages are recorded as always (an unavailable one
//     among them spends an attempt: the destination answered for the
//     others, and only the backoff of a retry keeps a message that keeps
//     failing from looping), and an open circuit closes;
//   - neither: the call was cut short by the dispatcher's own stop.
//
// While the circuit is open the dispatcher makes no Publish call: events
// claimed before it opened that reach the publish step go back to PENDING
// unpublished (at-least-once; see heldBack). It claims nothing that needs
// the publisher: a dispatcher that claims only some types (see ClaimedTypes)
// keeps claiming its handler-only types (those not in PublishTypes); one
// that claims every type claims nothing. After the backoff one probe goes
// through: a claim of at most CircuitProbeSize events that need the
// publisher. Its publish decides: reachable closes the circuit, an outage
// opens it again with twice the backoff (up to CircuitMaxBackoff). A probe
// that found nothing to publish decides nothing: one that claimed only
// events whose route is empty asks for another at once, one that claimed
// nothing leaves it to the next poll or wake-up.
//
// Under AtMostOnce the events of an outage call still become FAILED, as any
// failed attempt does in that mode: a publisher cannot prove that a message
// of a call that timed out did not reach the broker, and publishing it again
// could deliver it twice. The circuit opens all the same, so that an outage
// costs the events of the calls already under way and one probe per backoff
// (CircuitProbeSize events), not the whole backlog.

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

// judgePublish reports a publish call's results to the circuit, and
// whether the call was an outage (see above). ctx is the call's context:
// a call cancelled by the dispatcher's stop says nothing of the
// destination.
func (d *Dispatcher) judgePublish(ctx context.Context, errs []error) (outage bool) {
	if context.Cause(ctx) != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	outage, reached, cause := verdict(errs)
	if !outage && !reached {
		return false
	}
	if outage {
		if ch, ok := d.circuit.Outage(); ok {
			reportCircuit(d.report, ch, cause)
		}
	} else if ch, ok := d.circuit.Reachable(); ok {
		reportCircuit(d.report, ch, nil)
	}
	return outage
}

// heldBack returns items to PENDING without calling the publisher while
// the circuit is open (at-least-once only), and reports whether it did:
// events claimed before the circuit opened reach the publish step after,
// and must not hammer the destination. Under AtMostOnce they are
// published (and, if the destination is still down, FAILED): their
// handler may have run, and running it again could repeat it.
func (d *Dispatcher) heldBack(items []*held.Item) bool {
	if d.cfg.Delivery == AtMostOnce || !d.circuit.IsOpen() {
		return false
	}
	d.report.Counters.OutageReturned.Add(uint64(len(items)))
	for _, it := range items {
		d.finish(it, held.Result{Err: errCircuitOpen, Release: true})
	}
	return true
}

// errCircuitOpen is the error of the events heldBack returned.
var errCircuitOpen = errors.New("the publisher's circuit is open")

// verdict reads the errors of a call: an outage when every message a
// publisher attempted failed unavailable (cause is one of them), reached
// when one succeeded or failed for another reason, neither when nothing
// was attempted. outbox.ErrNotAttempted (a key-ordered publisher's later
// message of a key that failed) says nothing either way.
func verdict(errs []error) (outage, reached bool, cause error) {
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

// publishFailure is the result of a message that failed to publish:
// returned to PENDING without an attempt when its call was an outage
// (at-least-once only; see above), else as classify says.
func (d *Dispatcher) publishFailure(it *held.Item, ctx context.Context, err error, outage bool) held.Result {
	res := d.publishResult(it, ctx, err)
	if !outage || res.Release || d.cfg.Delivery == AtMostOnce {
		return res
	}
	d.report.Counters.OutageReturned.Add(1)
	return held.Result{Err: err, Release: true}
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

// reportCircuit counts and logs, through r, a transition of the circuit:
// WARN when it opens (with the cause), INFO when it closes, each at most
// once per loglimit.Interval with a count of the lines held back.
func reportCircuit(r *report.Reporter, ch circuit.Change, cause error) {
	if ch.To == circuit.Closed {
		r.CircuitClosed(ch.Since)
		return
	}
	r.CircuitOpened(ch.From == circuit.Closed, ch.From == circuit.Probing, ch.Backoff, cause)
}

// observeCircuit registers the circuit state gauge (pgoutbox.circuit.state:
// 0 closed, 1 open, 2 probing) of a dispatcher with a Publisher, and
// returns its unregistration.
func (d *Dispatcher) observeCircuit() (unregister func()) {
	if d.cfg.Publisher == nil {
		return func() {}
	}
	return d.report.ObserveGauge("pgoutbox.circuit.state", "1", "State of the publisher's circuit: 0 closed, 1 open, 2 probing",
		func() int64 { state, _ := d.circuit.Snapshot(); return int64(state) })
}
