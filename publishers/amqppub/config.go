package amqppub

import (
	"cmp"
	"context"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Defaults and bounds of [Config]. The bounds are inclusive.
const (
	// DefaultURL is the default of Config.URL: a broker on this machine
	// with RabbitMQ's default user.
	DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultMaxInFlight is the default of Config.MaxInFlight.
	DefaultMaxInFlight = 512
	// DefaultIdleChannels is the default of Config.IdleChannels.
	DefaultIdleChannels = 8
	// DefaultConfirmTimeout is the default of Config.ConfirmTimeout.
	DefaultConfirmTimeout = 5 * time.Second
	// MinConfirmTimeout is the smallest Config.ConfirmTimeout accepted.
	MinConfirmTimeout = 10 * time.Millisecond
	// MaxConfirmTimeout is the largest Config.ConfirmTimeout accepted.
	MaxConfirmTimeout = 10 * time.Minute
	// DefaultMaxMessageSize is the default of Config.MaxMessageSize: 16
	// MiB, the max_message_size of RabbitMQ 4 (RabbitMQ 3.8 to 3.13 take
	// 128 MiB).
	DefaultMaxMessageSize = 16 << 20
	// MaxMessageSizeLimit is the largest Config.MaxMessageSize accepted:
	// 512 MiB, the largest max_message_size RabbitMQ takes.
	MaxMessageSizeLimit = 512 << 20
	// MaxShortString is the longest AMQP short string: an exchange name,
	// a routing key, a message property such as type or content_type, a
	// header name.
	MaxShortString = 255
)

// maxInFlightLimit is the largest Config.MaxInFlight and Config.IdleChannels
// accepted, maxSourceLen the longest Config.Source, in bytes.
const (
	maxInFlightLimit = 65536
	maxIdleChannels  = 1024
	maxSourceLen     = 1024
	connectionName   = "pgoutbox-amqppub"
	defaultHeartbeat = 10 * time.Second
)

// Route is where one message goes: an exchange and a routing key.
type Route struct {
	// Exchange is the exchange the message is published to; "" is the
	// default exchange, which routes to the queue named by RoutingKey.
	Exchange string
	// RoutingKey is the message's routing key.
	RoutingKey string
}

// RouteParams is what a Config.RouteFunc routes on. Fields may be added.
type RouteParams struct {
	// Destination is Message.Destination: by default the event type, as
	// the dispatcher's router chose it.
	Destination string
	// Event is the event the message carries.
	Event outbox.Event
}

// DialParams is what a Config.DialFunc receives. Fields may be added.
type DialParams struct {
	// URL is Config.URL.
	URL string
	// Timeout bounds the dial and the AMQP handshake: Config.ConfirmTimeout.
	Timeout time.Duration
}

// Config tunes a [Publisher]. The zero value is valid and means every
// default.
type Config struct {
	// URL is the AMQP URI of the broker, e.g.
	// "amqps://user:secret@rabbit.internal:5671/vhost". Errors and logs
	// show it with its password redacted. Ignored when DialFunc is set,
	// except that it is handed to DialFunc. Defaults to DefaultURL
	// ("amqp://guest:guest@127.0.0.1:5672/").
	URL string

	// DialFunc opens a connection, for TLS, other credentials or
	// amqp.Config settings (the Publisher owns and closes the connection
	// it returns, and dials again after the connection is lost). It must
	// not enable amqp.Config.Recovery: the Publisher recovers by itself.
	// Defaults to amqp.DialConfig on URL with a heartbeat of 10 seconds,
	// the connection name "pgoutbox-amqppub", and a socket whose every
	// write must finish within ConfirmTimeout (a broker that stops
	// reading, as a blocked or stalled one does, cannot hang Publish) and
	// that Close closes when the broker does not answer its close within
	// ConfirmTimeout.
	DialFunc func(ctx context.Context, p DialParams) (*amqp.Connection, error)

	// Exchange is the exchange every message is published to when
	// RouteFunc is nil. The Publisher declares nothing: the exchange, its
	// queues and bindings belong to the caller. Defaults to "" (the default
	// exchange, which routes a message to the queue its routing key
	// names).
	Exchange string

	// RoutingKeyPrefix is prepended, byte for byte, to
	// Message.Destination to form the routing key when RouteFunc is nil:
	// with "orders." the destination "order.created" (the dispatcher's
	// default router uses the event type) has the routing key
	// "orders.order.created". At most 255 bytes. Defaults to "".
	RoutingKeyPrefix string

	// RouteFunc, when set, chooses the exchange and routing key of every
	// message instead of Exchange and RoutingKeyPrefix; it must be safe
	// for concurrent use. An error it returns fails the message
	// permanently. Defaults to nil.
	RouteFunc func(RouteParams) (Route, error)

	// Source is the CloudEvents source attribute of every message (header
	// cloudEvents_source): a URI reference naming the producing service.
	// At most 1024 bytes that follow the header rule for values (see
	// package outbox). Defaults to outbox.DefaultSource ("/pgoutbox").
	Source string

	// MaxInFlight is how many messages one Publish call keeps published
	// and unconfirmed on its channel: the batch is pipelined through this
	// window. Every channel holds room for as many returned messages
	// (264 bytes each, so that the client never drops one), which
	// makes a large window cost memory per channel: 65536 is 17 MB.
	// 1 to 65536. Defaults to 512.
	MaxInFlight int

	// IdleChannels is how many confirm channels the Publisher keeps open
	// between calls. Each Publish call takes a channel of its own (an idle
	// one, or a new one) and gives it back when every message it sent was
	// confirmed; a channel beyond this count is closed instead. 1 to 1024.
	// Defaults to 8.
	IdleChannels int

	// ConfirmTimeout is how long Publish waits for the broker to confirm
	// one message after sending it; a message not confirmed by then
	// reports [ErrConfirmTimeout], an outage. It also bounds a dial, and
	// every socket write of the default DialFunc. 10ms to 10 minutes.
	// Defaults to 5 seconds.
	ConfirmTimeout time.Duration

	// MaxMessageSize is the largest payload Publish sends, in bytes: a
	// larger one fails permanently before it is sent. Set it to the
	// broker's max_message_size. 1 to 512 MiB. Defaults to 16 MiB
	// (DefaultMaxMessageSize).
	MaxMessageSize int

	// KeyOrder makes Publish keep the order of each outbox.OrderKey
	// within a call, as outbox.KeyOrderedPublisher promises: it sends a
	// key's next message only once the broker confirmed the previous one,
	// and after a key's first failure reports the rest of the key with
	// outbox.ErrNotAttempted, unsent. Set it with a dispatcher whose
	// Ordering is PerKey. It costs a round trip per message of a key
	// that a call holds more than once. Defaults to false: every message
	// is pipelined, and a failed message does not hold back the later
	// ones of its key.
	KeyOrder bool
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, DefaultURL)
	c.Source = cmp.Or(c.Source, outbox.DefaultSource)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.IdleChannels = cmp.Or(c.IdleChannels, DefaultIdleChannels)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, DefaultConfirmTimeout)
	c.MaxMessageSize = cmp.Or(c.MaxMessageSize, DefaultMaxMessageSize)
	return c
}

// validate reports the first out-of-range field as an *outbox.ConfigError.
func (c Config) validate() error {
	switch {
	case c.MaxInFlight < 1 || c.MaxInFlight > maxInFlightLimit:
		return &outbox.ConfigError{Field: "MaxInFlight", Reason: "must be between 1 and 65536"}
	case c.IdleChannels < 1 || c.IdleChannels > maxIdleChannels:
		return &outbox.ConfigError{Field: "IdleChannels", Reason: "must be between 1 and 1024"}
	case c.ConfirmTimeout < MinConfirmTimeout || c.ConfirmTimeout > MaxConfirmTimeout:
		return &outbox.ConfigError{Field: "ConfirmTimeout", Reason: "must be between 10ms and 10m"}
	case c.MaxMessageSize < 1 || c.MaxMessageSize > MaxMessageSizeLimit:
		return &outbox.ConfigError{Field: "MaxMessageSize", Reason: "must be between 1 and 536870912"}
	case len(c.Exchange) > MaxShortString:
		return &outbox.ConfigError{Field: "Exchange", Reason: "must be at most 255 bytes"}
	case len(c.RoutingKeyPrefix) > MaxShortString:
		return &outbox.ConfigError{Field: "RoutingKeyPrefix", Reason: "must be at most 255 bytes"}
	case len(c.Source) > maxSourceLen:
		return &outbox.ConfigError{Field: "Source", Reason: "must be at most 1024 bytes"}
	}
	if reason := outbox.HeaderValueProblem(c.Source); reason != "" {
		return &outbox.ConfigError{Field: "Source", Reason: reason}
	}
	if c.DialFunc == nil {
		if _, err := amqp.ParseURI(c.URL); err != nil {
			return &outbox.ConfigError{Field: "URL", Reason: "is not an AMQP URI (amqp:// or amqps://, " + redact(c.URL) + ")"}
		}
	}
	return nil
}

// redact returns u with any password replaced by "xxxxx", or a placeholder
// when u does not parse (it might hold a password in a form url.Parse
// cannot find).
func redact(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "<unparsable URL>"
	}
	return parsed.Redacted()
}

// redactErr returns err, or when its text holds the password of u, an
// error whose text has it replaced by "xxxxx" and that unwraps to err.
func redactErr(err error, u string) error {
	parsed, perr := url.Parse(u)
	if perr != nil || parsed.User == nil {
		return err
	}
	pw, ok := parsed.User.Password()
	if !ok || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &redactedError{text: strings.ReplaceAll(err.Error(), pw, "xxxxx"), err: err}
}

// redactedError is an error whose text had a password taken out.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }
