package run

import (
	"context"
	"errors"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
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

// judgePublish reports a publish call's results to the circuit, and
// whether the call was an outage (see above). ctx is the call's context:
// a call cancelled by the dispatcher's stop says nothing of the
// destination.
func (r *Runner) judgePublish(ctx context.Context, errs []error) (outage bool) {
	if context.Cause(ctx) != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	outage, reached, cause := circuit.Verdict(errs)
	if !outage && !reached {
		return false
	}
	if outage {
		if ch, ok := r.circuit.Outage(); ok {
			reportCircuit(r.report, ch, cause)
		}
	} else if ch, ok := r.circuit.Reachable(); ok {
		reportCircuit(r.report, ch, nil)
	}
	return outage
}

// heldBack returns items to PENDING without calling the publisher while
// the circuit is open (at-least-once only), and reports whether it did:
// events claimed before the circuit opened reach the publish step after,
// and must not hammer the destination. Under AtMostOnce they are
// published (and, if the destination is still down, FAILED): their
// handler may have run, and running it again could repeat it.
func (r *Runner) heldBack(items []*held.Item) bool {
	if r.cfg.AtMostOnce || !r.circuit.IsOpen() {
		return false
	}
	r.report.Counters.OutageReturned.Add(uint64(len(items)))
	for _, it := range items {
		r.finish(it, held.Result{Err: errCircuitOpen, Release: true})
	}
	return true
}

// errCircuitOpen is the error of the events heldBack returned.
var errCircuitOpen = errors.New("the publisher's circuit is open")

// publishFailure is the result of a message that failed to publish:
// returned to PENDING without an attempt when its call was an outage
// (at-least-once only; see above), else as classify says.
func (r *Runner) publishFailure(it *held.Item, ctx context.Context, err error, outage bool) held.Result {
	res := r.publishResult(it, ctx, err)
	if !outage || res.Release || r.cfg.AtMostOnce {
		return res
	}
	r.report.Counters.OutageReturned.Add(1)
	return held.Result{Err: err, Release: true}
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
