package kafkapub

import (
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config tunes a [Publisher]. The zero value is ready to use: every field
// documents its default and the range [New] and [NewFromOpts] accept.
type Config struct {
	// TopicPrefix is prepended to each Message.Destination to form the
	// Kafka topic, e.g. "prod." turns "order.created" into
	// "prod.order.created". It must consist of the characters Kafka allows
	// in topic names (ASCII letters, digits, '.', '_' and '-') and be at
	// most 200 bytes. Defaults to "" (the destination is the topic).
	TopicPrefix string

	// Source is the CloudEvents source attribute of every record (header
	// ce_source): a URI reference naming the producing service, e.g.
	// "/orders-service" or "urn:acme:orders". At most 1024 bytes that
	// follow the header rule for values (see package outbox). Defaults to
	// outbox.DefaultSource ("/pgoutbox").
	Source string

	// KeyFunc returns the record key of an event. A nil or empty key lets
	// franz-go's partitioner spread records, with no ordering between
	// them. Records with equal keys go to the same partition and keep
	// their batch order. Defaults to [KeyPartitionOrAggregate].
	KeyFunc func(e outbox.Event) []byte

	// KeyOrder makes Publish keep the order of each outbox.OrderKey
	// within a call, as outbox.KeyOrderedPublisher promises: it produces
	// a key's next message only once the broker acknowledged the previous
	// one, and after a key's first failure reports the rest of the key
	// with outbox.ErrNotAttempted, unsent. Keys, and messages without a
	// key, still go side by side. Set it with a dispatcher whose Ordering
	// is PerKey, which then sends a key's run of events in one call
	// instead of one event per call; see [Publisher.PublishesKeysInOrder]
	// for what else it needs. It costs a round trip per message of a key
	// that a call holds more than once. Defaults to false: every message
	// is produced at once, and a failed message does not hold back the
	// later ones of its key.
	KeyOrder bool

	// PublishTimeout bounds a Publish call whose context has no deadline;
	// a context with a deadline is used as it is. From 1ms to 1h. Defaults
	// to 30s.
	PublishTimeout time.Duration

	// UnknownTopicRetries is how many times franz-go looks a topic up
	// again after the cluster answered UNKNOWN_TOPIC_OR_PARTITION before
	// it fails the records, which Publish then reports as a retryable
	// error (the dispatcher tries the event again on its backoff). From 1
	// to 100; 0 selects the default. Defaults to 1, so a Publish to a
	// missing topic returns after two metadata lookups instead of
	// franz-go's five, rather than hold the dispatcher's worker.
	// Set UnlimitedUnknownTopicRetries instead to retry until the Publish
	// context ends.
	//
	// It is applied only to the client [NewFromOpts] builds, before the
	// caller's options, so a kgo.UnknownTopicRetries among them wins.
	// [New] uses the caller's client exactly as it was built.
	UnknownTopicRetries int
	// UnlimitedUnknownTopicRetries makes franz-go look a missing topic up
	// again until the Publish context ends, so that one attempt waits for
	// a topic created after its first events are published instead of
	// failing it and leaving the next try to the dispatcher's backoff
	// (UnknownTopicRetries must then be zero). Like UnknownTopicRetries,
	// it applies only to the client NewFromOpts builds. Defaults to false.
	UnlimitedUnknownTopicRetries bool
}

// Defaults applied by withDefaults.
const (
	defaultPublishTimeout      = 30 * time.Second
	defaultUnknownTopicRetries = 1
	maxTopicPrefixLen          = 200
	maxSourceLen               = 1024
)

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Source == "" {
		c.Source = outbox.DefaultSource
	}
	if c.KeyFunc == nil {
		c.KeyFunc = KeyPartitionOrAggregate
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = defaultPublishTimeout
	}
	if c.UnknownTopicRetries == 0 && !c.UnlimitedUnknownTopicRetries {
		c.UnknownTopicRetries = defaultUnknownTopicRetries
	}
	return c
}

// unknownTopicRetries is the value of kgo.UnknownTopicRetries for c, whose
// -1 means "until the context ends".
func (c Config) unknownTopicRetries() int {
	if c.UnlimitedUnknownTopicRetries {
		return -1
	}
	return c.UnknownTopicRetries
}

// validate reports the first field that is out of range as an
// *outbox.ConfigError. It expects defaults to be applied.
func (c Config) validate() error {
	switch {
	case len(c.TopicPrefix) > maxTopicPrefixLen:
		return configError("TopicPrefix", "must be at most 200 bytes")
	case !legalTopicChars(c.TopicPrefix):
		return configError("TopicPrefix", "must contain only ASCII letters, digits, '.', '_' and '-'")
	case len(c.Source) > maxSourceLen:
		return configError("Source", "must be at most 1024 bytes")
	case outbox.HeaderValueProblem(c.Source) != "":
		return configError("Source", outbox.HeaderValueProblem(c.Source))
	case c.PublishTimeout < time.Millisecond || c.PublishTimeout > time.Hour:
		return configError("PublishTimeout", "must be between 1ms and 1h")
	case c.UnlimitedUnknownTopicRetries && c.UnknownTopicRetries != 0:
		return configError("UnknownTopicRetries", "must be zero when UnlimitedUnknownTopicRetries is set")
	case !c.UnlimitedUnknownTopicRetries && (c.UnknownTopicRetries < 1 || c.UnknownTopicRetries > 100):
		return configError("UnknownTopicRetries", "must be between 1 and 100 (set UnlimitedUnknownTopicRetries to retry until the Publish context ends)")
	}
	return nil
}

func configError(option, reason string) error {
	return &outbox.ConfigError{Field: option, Reason: reason}
}

// KeyPartitionOrAggregate is the default [Config.KeyFunc]: the event's
// PartitionKey, or its AggregateID when PartitionKey is empty, or no key
// when both are empty.
func KeyPartitionOrAggregate(e outbox.Event) []byte {
	if e.PartitionKey != "" {
		return []byte(e.PartitionKey)
	}
	return KeyAggregate(e)
}

// KeyPartition is a [Config.KeyFunc] that uses only the event's
// PartitionKey, and no key when it is empty.
func KeyPartition(e outbox.Event) []byte {
	if e.PartitionKey == "" {
		return nil
	}
	return []byte(e.PartitionKey)
}

// KeyAggregate is a [Config.KeyFunc] that uses only the event's
// AggregateID, and no key when it is empty, so all events of one aggregate
// keep their order whatever their PartitionKey.
func KeyAggregate(e outbox.Event) []byte {
	if e.AggregateID == "" {
		return nil
	}
	return []byte(e.AggregateID)
}
