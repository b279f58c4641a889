package pgwatermill

import (
	"cmp"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Defaults and bounds of [PublisherConfig] and [SubscriberConfig]. The
// bounds are inclusive.
const (
	// DefaultPublishTimeout is the default of PublisherConfig.PublishTimeout.
	DefaultPublishTimeout = 30 * time.Second
	// DefaultCloseTimeout is the default of SubscriberConfig.CloseTimeout.
	DefaultCloseTimeout = time.Minute
	// MaxTimeout is the largest PublishTimeout and CloseTimeout accepted.
	MaxTimeout = time.Hour
)

// OrderKeyParams is what PublisherConfig.OrderKeyFunc is given; fields may
// be added.
type OrderKeyParams struct {
	// Topic is the topic of the Publish call, the event type.
	Topic string
	// Message is the message being published. The func must not change it.
	Message *message.Message
}

// PublisherConfig tunes a [Publisher]. The zero value is valid and means
// every default.
type PublisherConfig struct {
	// Emitter configures the emitter Publish writes with: the outbox table,
	// payload and header limits, notify throttling, telemetry. Defaults to
	// the emitter's defaults (table public.outbox_events; see
	// emitter.Config).
	Emitter emitter.Config

	// OrderKeyFunc returns the order key (Event.PartitionKey) of a message
	// that does not set [MetadataPartitionKey]; "" means none. Returning
	// the topic puts every event of a topic in one order, which a
	// dispatcher with Ordering PerKey (and so the [Subscriber]) keeps.
	// Defaults to nil: only the metadata sets the key.
	OrderKeyFunc func(OrderKeyParams) string

	// NewEventIDs gives every published message a fresh event ID (a
	// UUIDv7) and carries its UUID in the [MetadataUUID] header, so that
	// publishing the same message twice makes two events, each delivered,
	// as Watermill's brokers do. Defaults to false: the event ID is the
	// message's UUID ([EventID]), so downstream consumers of any publisher
	// deduplicate on it, and publishing a message whose event is still in
	// the outbox fails with outbox.ErrDuplicateID, which aborts the
	// caller's transaction (see Publisher.Publish).
	NewEventIDs bool

	// PublishTimeout bounds the database work of one Publish call (its
	// own transaction with a pool, or the Emit in the caller's
	// transaction): Watermill's Publish takes no context. 1ms to 1 hour.
	// Defaults to 30 seconds.
	PublishTimeout time.Duration
}

// WithDefaults returns c with every zero field set to its documented
// default.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	return c
}

func (c PublisherConfig) validate() error {
	if c.PublishTimeout < time.Millisecond || c.PublishTimeout > MaxTimeout {
		return &outbox.ConfigError{Field: "PublishTimeout", Reason: "must be between 1ms and 1h"}
	}
	return nil
}

// SubscriberConfig tunes a [Subscriber]. The zero value is valid and
// means every default.
type SubscriberConfig struct {
	// Dispatcher configures the dispatcher each Subscribe call runs: the
	// outbox table, batch size, concurrency, retry budget (MaxAttempts)
	// and backoff of Nacked messages, ordering, lease, logger, telemetry.
	// Defaults to the dispatcher's defaults (see dispatcher.Config), with
	// four differences: Delivery must be AtLeastOnce (the default: Ack
	// and Nack decide each event's outcome, and a stop gives back what
	// was not acknowledged; AtMostOnce would make those FAILED); NoDrain
	// is always set (Close and the end of a
	// Subscribe context give every message not yet acknowledged back at
	// once, unspent), so DrainTimeout must be zero; NoHandlerTimeout is set
	// unless HandlerTimeout is, so a message waits for its Ack or Nack as
	// long as the consumer takes (HandlerTimeout, when set, is the ack
	// deadline: a message neither acknowledged nor nacked by then is
	// retried, spending an attempt); and Publisher, PublishTypes and
	// DefaultHandler must be unset, since a subscription claims only its
	// topic.
	Dispatcher dispatcher.Config

	// CloseTimeout bounds how long Close waits for the dispatchers to give
	// back the messages not acknowledged and record the outcomes. 1ms to
	// 1 hour. Defaults to 1 minute.
	CloseTimeout time.Duration
}

// WithDefaults returns c with every zero field set to its documented
// default, and the dispatcher settings the Subscriber needs.
func (c SubscriberConfig) WithDefaults() SubscriberConfig {
	c.CloseTimeout = cmp.Or(c.CloseTimeout, DefaultCloseTimeout)
	c.Dispatcher.NoDrain = true
	if c.Dispatcher.HandlerTimeout == 0 {
		c.Dispatcher.NoHandlerTimeout = true
	}
	return c
}

func (c SubscriberConfig) validate() error {
	checks := []struct {
		ok            bool
		field, reason string
	}{
		{c.CloseTimeout >= time.Millisecond && c.CloseTimeout <= MaxTimeout, "CloseTimeout", "must be between 1ms and 1h"},
		{c.Dispatcher.Delivery == dispatcher.AtLeastOnce, "Dispatcher.Delivery", "must be AtLeastOnce: under AtMostOnce a stop " +
			"makes FAILED the messages not acknowledged, those never handed out included, and a Nack FAILED at once"},
		{c.Dispatcher.DrainTimeout == 0, "Dispatcher.DrainTimeout", "must be zero: the Subscriber gives back unacknowledged messages at once (NoDrain)"},
		{c.Dispatcher.Publisher == nil, "Dispatcher.Publisher", "must be nil: a subscription claims only its topic"},
		{len(c.Dispatcher.PublishTypes) == 0, "Dispatcher.PublishTypes", "must be empty: a subscription claims only its topic"},
		{c.Dispatcher.DefaultHandler == nil, "Dispatcher.DefaultHandler", "must be nil: a subscription claims only its topic"},
	}
	for _, check := range checks {
		if !check.ok {
			return &outbox.ConfigError{Field: check.field, Reason: check.reason}
		}
	}
	return nil
}
