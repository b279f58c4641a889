package amqppub

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// originError is an error of this adapter about one of pgoutbox's: it
// reads "<context>: <err>", context starting with "amqppub" and err's
// text without its "pgoutbox: ", so the text names one origin; it unwraps
// to err.
type originError struct {
	context string
	err     error
}

func (e *originError) Error() string {
	return e.context + ": " + strings.TrimPrefix(e.err.Error(), "pgoutbox: ")
}

func (e *originError) Unwrap() error { return e.err }

var (
	// ErrUnroutable is the cause of a message the broker returned
	// (basic.return, reply 312 NO_ROUTE): its exchange exists but routed
	// it to no queue. It is permanent: the message was published with the
	// mandatory flag and nothing holds it.
	ErrUnroutable = errors.New("amqppub: unroutable: the exchange routed the message to no queue")

	// ErrNacked is the cause of a message the broker refused with
	// basic.nack: it could not store it (a queue at its max-length with
	// overflow reject-publish, an internal error). It is retryable.
	ErrNacked = errors.New("amqppub: the broker nacked the message")

	// ErrConfirmTimeout is the cause of a message the broker did not
	// confirm within Config.ConfirmTimeout, and of every message of a
	// call whose channel opening or exchange check the broker did not
	// answer within it. It is an outage: the message may or may not be
	// stored.
	ErrConfirmTimeout = errors.New("amqppub: no confirm within the confirm timeout")

	// ErrBlocked is the cause of every message of a call made while the
	// broker has blocked the connection (connection.blocked: a memory or
	// disk alarm). It is an outage; nothing was sent.
	ErrBlocked = errors.New("amqppub: the broker blocked the connection (resource alarm)")

	// ErrMissingExchange is the cause of a message whose exchange does
	// not exist (404 NOT_FOUND). It is an outage, never permanent: a
	// deploy may declare the exchange later.
	ErrMissingExchange = errors.New("amqppub: the exchange does not exist")

	// ErrAccessRefused is the cause of a message the broker refused with
	// 403 ACCESS_REFUSED: the user may not write to its exchange (or to
	// its routing key, with topic permissions), or the exchange is
	// internal. It is permanent, as a publish permission denied is for
	// natspub and an authorization failure for kafkapub: retrying cannot
	// help until someone grants the permission.
	ErrAccessRefused = errors.New("amqppub: access refused: the user may not publish to the exchange or routing key")

	// ErrConnection is the cause of a message that failed because the
	// connection or its channel could not be opened, was lost or closed.
	// It is an outage; the Publisher dials again on its next call.
	ErrConnection = errors.New("amqppub: connection or channel unavailable")

	// ErrMessageTooLarge is the cause of a message larger than
	// Config.MaxMessageSize, or refused by the broker as larger than its
	// max_message_size. It is permanent.
	ErrMessageTooLarge = errors.New("amqppub: message larger than the maximum message size")

	// ErrClosed is returned for every message of a call made after Close.
	// It is retryable.
	ErrClosed = errors.New("amqppub: publisher closed")
)

// routeError is the context of every error about one message: the exchange
// and routing key it was published to, never a payload or header value.
func routeError(r Route, cause error) error {
	return fmt.Errorf("amqppub: publish to exchange %q with routing key %q: %w", r.Exchange, r.RoutingKey, cause)
}

// classify wraps cause, the failure of a message bound for r, with
// outbox.Permanent or outbox.Unavailable as the package documentation
// says.
func classify(r Route, cause error) error {
	err := routeError(r, cause)
	var c *cancelled
	switch {
	case errors.As(cause, &c):
		return err
	case errors.Is(cause, ErrUnroutable), errors.Is(cause, ErrMessageTooLarge), errors.Is(cause, ErrAccessRefused):
		return outbox.Permanent(err)
	case errors.Is(cause, ErrNacked):
		return err
	case errors.Is(cause, ErrMissingExchange):
		return outbox.Unavailable(fmt.Errorf("%w (declare it, and the events are published; retryable)", err))
	}
	return outbox.Unavailable(err)
}

// closeCause turns the error a channel or connection closed with into the
// cause its unconfirmed messages report: a 404 is a missing exchange, a
// 403 a refused publish, a 406 about the message size is an over-size
// message, anything else a lost channel or connection.
func closeCause(e *amqp.Error) error {
	switch {
	case e == nil:
		return ErrConnection
	case e.Code == amqp.NotFound:
		return fmt.Errorf("%w (%d %s)", ErrMissingExchange, e.Code, e.Reason)
	case e.Code == amqp.AccessRefused && backendFailed(e.Reason):
		return fmt.Errorf("%w: the broker's authorization backend could not check the permission: %w", ErrConnection, e)
	case e.Code == amqp.AccessRefused:
		return fmt.Errorf("%w (%d %s)", ErrAccessRefused, e.Code, e.Reason)
	case e.Code == amqp.PreconditionFailed && tooLarge(e.Reason):
		return fmt.Errorf("%w (%d %s)", ErrMessageTooLarge, e.Code, e.Reason)
	}
	return fmt.Errorf("%w: %w", ErrConnection, e)
}

// backendFailed reports whether a 403 close reason may be the broker's
// authorization backend (LDAP, HTTP, OAuth 2) failing to answer, not a
// denial: RabbitMQ then appends ", backend M returned an error: E" to
// the denial's text. Retrying succeeds once the backend is back. A
// reason RabbitMQ cut (past 255 bytes it keeps 252 and "...", which a
// long user, vhost or exchange name causes) may have lost that suffix,
// so it counts too: retrying a denial costs attempts, failing an outage
// for good loses the event.
func backendFailed(reason string) bool {
	cut := len(reason) >= maxReplyText && strings.HasSuffix(reason, "...")
	return cut || (strings.Contains(reason, ", backend ") && strings.Contains(reason, " returned an error"))
}

// maxReplyText is the length of the longest reply text AMQP 0-9-1 can
// carry (a shortstr).
const maxReplyText = 255

// tooLarge reports whether a channel close reason is the broker refusing a
// message over its max_message_size ("message size N is larger than
// configured max size M").
func tooLarge(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "message size") && (strings.Contains(r, "larger") || strings.Contains(r, "exceeds"))
}

// namesSize reports whether a 406 close reason names size as the size of
// the message it refused.
func namesSize(reason string, size int) bool {
	return strings.Contains(reason, fmt.Sprintf("message size %d ", size))
}

// namesRoute reports whether a 403 close reason names r: its exchange
// and, when the reason is about a topic permission ("access to topic 'k'
// in exchange 'x' in vhost '/' refused for user 'u'"), its routing key.
func namesRoute(reason string, r Route) bool {
	if strings.Contains(reason, "topic '") && !strings.Contains(reason, "topic '"+r.RoutingKey+"'") {
		return false
	}
	return namesExchange(reason, r.Exchange)
}

// namesExchange reports whether a 404 or 403 close reason ("NOT_FOUND -
// no exchange 'x' in vhost '/'", "ACCESS_REFUSED - access to exchange 'x'
// in vhost '/' refused for user 'u'") names the exchange name; RabbitMQ
// names the default exchange "amq.default".
func namesExchange(reason, name string) bool {
	if name == "" {
		name = "amq.default"
	}
	return strings.Contains(reason, "exchange '"+name+"'")
}
