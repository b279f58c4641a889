// Package kafkapub publishes outbox events to Apache Kafka with franz-go.
//
// # Its part in the whole
//
// Business code emits events into the outbox table inside its own
// transaction. The dispatcher claims committed events, asks its router for
// each event's destination (by default the event type) and hands batches
// to an outbox.Publisher. A [Publisher] from this package produces each
// batch to Kafka, pipelined, waits for every acknowledgement and returns
// one outcome per event, which the dispatcher records as SENT, a retry, or
// FAILED for errors marked permanent.
//
//	p, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: "prod."},
//		kgo.SeedBrokers("kafka-1:9092", "kafka-2:9092"),
//		kgo.DialTLSConfig(tlsConfig),
//	)
//	if err != nil { … }
//	defer p.Close()
//
// [New] takes a *kgo.Client that the caller built and keeps owning;
// [NewFromOpts] builds one from kgo options, which all pass straight
// through, and closes it in [Publisher.Close].
//
// # Records
//
// The topic is Config.TopicPrefix followed by the message's destination.
// The value is the event payload, unchanged. The record is a CloudEvent in
// the binary content mode of the CloudEvents Kafka protocol binding: the
// event's fields travel as CloudEvents attributes in headers named by the
// Header constants ([HeaderEventID], [HeaderEventType], …), all starting
// with [HeaderPrefix] ("ce_") except [HeaderContentType] ("content-type"),
// so any CloudEvents consumer reads the record (docs/envelope.md has the
// table). The event's own headers follow under their own names, an empty
// value included, so a "traceparent" header reaches consumers as
// "traceparent". Kafka headers are bytes: every name and value arrives
// byte for byte, including what the header rule of package outbox (which
// the emitter enforces for the sake of NATS) refuses. Only an event header
// whose name starts with HeaderPrefix or is "content-type", in any case,
// is refused, with a permanent error wrapping an
// *outbox.ValidationError (errors.Is outbox.ErrInvalidEvent, recorded as
// outbox.CodeInvalidEvent; the emitter already rejects it). [Decode] turns
// a consumed record back into an outbox.Event.
//
// # Keys and order
//
// The record key is chosen by Config.KeyFunc; by default it is the event's
// PartitionKey, or its AggregateID when PartitionKey is empty
// ([KeyPartitionOrAggregate]). Records with the same key go to the same
// partition and, within one Publish call, keep their batch order while
// nothing fails; across retries an event may arrive after events emitted
// later. Events with neither key are spread over partitions with no order
// between them.
//
// A failed produce does not stop the later records of its partition:
// franz-go fails every record it holds for the partition when the failure
// arrives, but one it is handed after that is written. So when a record
// fails in the middle of a call, later records of its key may already be,
// or still be, written before the dispatcher retries it.
// Config.KeyOrder closes that gap for a dispatcher whose Ordering is
// PerKey: a key's next record is produced only once the previous one was
// acknowledged, and after a key's first failure the rest of the key in
// the call is reported with outbox.ErrNotAttempted without being
// produced, so the dispatcher returns those events to PENDING without
// spending an attempt ([Publisher.PublishesKeysInOrder],
// outbox.KeyOrderedPublisher). Keys, and records without a key, still go
// side by side; a call holding many records of one key pays a round trip
// for each.
//
// # Durability and duplicates
//
// Publish reports success only for records the broker acknowledged with
// franz-go's default acks=all (all in-sync replicas). The idempotent
// producer, on by default, stops the broker from writing a record twice
// when franz-go resends it within one producer session. It does nothing
// across sessions: when a dispatcher dies after Kafka wrote a record but
// before the outbox recorded SENT, or when Publish gave up waiting for an
// acknowledgement, the outbox delivers the event again and Kafka stores it
// again. Delivery is therefore at least once, and consumers deduplicate on
// the event ID ([HeaderEventID]), for example with the pgoutbox inbox
// package.
//
// What kafkapub enforces: nothing on a client passed to [New]; on a client
// built by [NewFromOpts], acks=all, a bounded number of unknown-topic
// retries (Config.UnknownTopicRetries), a 1s minimum metadata age and no
// linger, each only where the caller's options do not say otherwise (see
// [NewFromOpts]). A caller who passes kgo.RequiredAcks(kgo.LeaderAck())
// together with kgo.DisableIdempotentWrite gets weaker guarantees than
// described here.
//
// # Errors
//
// These are permanent (outbox.Permanent), so the event goes to FAILED at
// once: an invalid topic name or a reserved event header name (both
// checked before sending), a record that the broker or client refuses as
// too large or invalid when it is produced alone, and topic or cluster
// authorization failures. Note that a cluster-wide authorization failure
// (for example a missing IDEMPOTENT_WRITE permission) fails every event.
// Everything else is retryable, including a Publish whose context ended
// first. franz-go itself retries retryable broker errors (not enough
// replicas, leader moved, …) after refreshing metadata, at most every
// kgo.MetadataMinAge, until the Publish context ends.
//
// # Outages
//
// An outage is never permanent: an unknown topic or topic ID (the topic
// is not created yet, for example events emitted before the deploy that
// creates it), brokers that cannot be reached, request and record
// timeouts. Such events are retried and delivered once the topic exists
// or the cluster answers.
//
// A cluster that cannot be reached is reported with outbox.Unavailable:
// records the client gave up on (kgo.ErrRecordTimeout after
// kgo.RecordDeliveryTimeout, kgo.ErrRecordRetries), a closed client
// (kgo.ErrClientClosed), dial and network errors, no leader or broker
// available, request timeouts, and a Publish whose context's deadline
// passed before the acknowledgements came (with every broker down
// franz-go retries until then and reports nothing else). When every
// message of a call reports unavailable, the dispatcher returns the
// events to PENDING without spending an attempt and opens its circuit
// (docs/dispatcher.md, "Outages"), so such an outage never makes an
// event FAILED. A missing topic is not "unavailable": it costs what any
// retryable failure costs, one attempt of the event per Publish call,
// recorded as publish_error, and the dispatcher's backoff before the
// next. With the dispatcher's defaults (MaxAttempts 10, 1s doubling,
// ±10%), the last attempt comes about 8.5 minutes after the first;
// raise MaxAttempts or Backoff.Max, or replay after (docs/brokers.md has
// a table).
//
// franz-go fails the records of a topic the cluster keeps calling unknown
// after kgo.UnknownTopicRetries further metadata lookups (4 by default),
// each at most every kgo.MetadataMinAge (5s by default), so a missing
// topic could hold a Publish for up to 20s. A client from [NewFromOpts]
// gives up after Config.UnknownTopicRetries further lookups (1 by default)
// at most 1s apart: against kfake a missing topic fails, retryably, in
// about 250ms, at worst about 1s. Automatic topic creation is off unless
// the caller enables it with kgo.AllowAutoTopicCreation, in which case a
// missing topic is created instead. Error texts name the topic and the
// Kafka error, never payload bytes or header values.
//
// # Rejected batches
//
// Kafka checks max.message.bytes (and its other size and validity rules)
// per record batch, not per record: one oversize record, or many small
// ones that franz-go put into one batch, get the whole batch rejected with
// MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE or INVALID_RECORD. franz-go then
// fails every record buffered for that partition with the same error, the
// records of other Publish calls included, and the error does not say
// which record caused it. A [Publisher] therefore treats these errors as a
// verdict on the batch, not on the record: it produces each record that
// met one again alone, with no other record of the Publisher buffered for
// its topic, and marks it permanent only when the broker rejects it alone
// twice. The others are stored, or get the outcome of their lone attempt,
// so a single bad event dead-letters only itself. This costs at most two
// extra round trips per record of a rejected batch, taken one at a time
// while the Publisher's other calls to that topic wait; see
// [Publisher.Publish].
package kafkapub
