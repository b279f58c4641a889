package outbox

import (
	"context"
	"errors"
)

// Handler processes one event in the dispatching process. A nil error marks
// the event SENT (when every handler and the publisher succeeded); an error
// schedules a retry, or FAILED when it is wrapped by [Permanent] or the
// retry budget is spent.
//
// ctx carries the handler timeout and is cancelled when the dispatcher can
// no longer renew the lease, so a handler must return promptly once ctx is
// done. A handler may run more than once for one event (at-least-once
// delivery): use e.ID as the idempotency key of its side effects.
type Handler func(ctx context.Context, e Event) error

// Message is one event on its way to a broker, with the destination (topic,
// subject) that the dispatcher's router chose for it.
type Message struct {
	// Destination is the topic or subject, as chosen by the router. A
	// publisher may add its own prefix.
	Destination string
	// Event is the event to publish, with its ID, type, key, headers and
	// payload exactly as emitted.
	Event Event
}

// Publisher sends batches of events to a broker.
//
// Publish must return a slice of exactly len(msgs) errors, in the order of
// msgs: nil where the broker acknowledged the message durably, the cause
// where it did not. Wrap a cause with [Permanent] when retrying cannot help
// (message too large, not authorised). An outage is never permanent: a
// destination that does not exist yet (no such topic or stream), an
// unreachable broker, a lost connection, a timeout. Wrap a cause with
// [Unavailable] when the destination as a whole could not be reached
// (connection refused, no broker or server answering, no responders, the
// connection closed, a timeout that took the whole call): when every
// message of a call reports it, the dispatcher returns the events to
// PENDING without spending an attempt and stops publishing for a while
// (a circuit; see the dispatcher's documentation). Any other failure,
// and an unavailable one beside messages that succeeded or failed
// otherwise, costs the event one attempt. When ctx ends,
// Publish returns promptly and reports every message it could not confirm
// with a retryable error (for example ctx.Err()). Errors must not contain
// payload bytes.
//
// Brokers should pipeline the batch rather than wait for each message in
// turn. Publish may be called concurrently.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) []error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the dispatcher records the event FAILED after
// this attempt instead of scheduling a retry. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked by
// [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ErrUnavailable is matched (errors.Is) by the errors [Unavailable] wraps:
// the destination as a whole could not be reached, through no fault of the
// event.
var ErrUnavailable = errors.New("pgoutbox: destination unavailable")

// unavailableError marks an error of a destination that could not be
// reached.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return "unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// Unavailable wraps err to say that the destination could not be reached
// (see [Publisher]): errors.Is(result, ErrUnavailable) holds, and err
// stays reachable through errors.Is and errors.As. Unavailable(nil)
// returns nil. An error that is both [Permanent] and unavailable counts
// as permanent.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err reports an unreachable destination:
// it matches ErrUnavailable and was not marked [Permanent].
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) && !IsPermanent(err)
}
