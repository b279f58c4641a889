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
// unreachable broker, a lost connection, a timeout; each such failure
// costs the event one attempt, like any retryable error. When ctx ends,
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
