package pgwatermill

import (
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Reserved metadata keys. On Publish each sets an event field instead of
// becoming a header; the Subscriber sets them from the event's fields, so
// a message forwarded from a Subscriber to a Publisher keeps them.
const (
	// MetadataPartitionKey sets Event.PartitionKey, the order key of
	// dispatchers with Ordering PerKey and the broker key of publishers. It
	// wins over PublisherConfig.OrderKeyFunc, even when it is "" (no key).
	MetadataPartitionKey = "pgoutbox-partition-key"
	// MetadataAggregateType sets Event.AggregateType.
	MetadataAggregateType = "pgoutbox-aggregate-type"
	// MetadataAggregateID sets Event.AggregateID (the order key when
	// there is no partition key).
	MetadataAggregateID = "pgoutbox-aggregate-id"
	// MetadataContentType sets Event.ContentType; a JSON content type makes
	// Emit check that the payload is JSON.
	MetadataContentType = "pgoutbox-content-type"
	// MetadataIdempotencyKey sets Event.IdempotencyKey.
	MetadataIdempotencyKey = "pgoutbox-idempotency-key"
	// MetadataUUID is the header that carries a message's UUID when the
	// event ID cannot: a UUID that is not a canonical UUID string, or any
	// UUID with PublisherConfig.NewEventIDs. The Subscriber gives it back
	// as msg.UUID and leaves it out of the metadata. Publish sets it; a
	// message's own value for it is ignored.
	MetadataUUID = "pgoutbox-watermill-uuid"
)

// fieldKeys are the reserved keys that set an event field, with a
// pointer to the field they set.
func fieldKeys(e *outbox.Event) [5]struct {
	key   string
	field *string
} {
	return [5]struct {
		key   string
		field *string
	}{
		{MetadataPartitionKey, &e.PartitionKey},
		{MetadataAggregateType, &e.AggregateType},
		{MetadataAggregateID, &e.AggregateID},
		{MetadataContentType, &e.ContentType},
		{MetadataIdempotencyKey, &e.IdempotencyKey},
	}
}

// uuidNamespace is the UUIDv5 namespace of the event IDs made from
// message UUIDs that are not canonical UUIDs.
var uuidNamespace = uuid.MustParse("6f1e2c3a-9b7d-4e5f-8a1b-2c3d4e5f6a7b")

// EventID returns the event ID Publish gives a message whose UUID is
// msgUUID (without PublisherConfig.NewEventIDs), and whether the UUID
// must travel in the [MetadataUUID] header: the UUID itself when msgUUID
// is a canonical UUID string (lower case, with hyphens, as
// watermill.NewUUID makes), else the UUIDv5 of msgUUID in a fixed
// namespace, so that the same message always gets the same ID. An empty
// msgUUID gives the zero ID (Emit then chooses a UUIDv7).
func EventID(msgUUID string) (uuid.UUID, bool) {
	if msgUUID == "" {
		return uuid.UUID{}, false
	}
	if id, err := uuid.Parse(msgUUID); err == nil && id.String() == msgUUID {
		return id, false
	}
	return uuid.NewSHA1(uuidNamespace, []byte(msgUUID)), true
}

// toEvent maps one message of topic to an event: see the package
// documentation. It never fails; Publish checks the result.
func toEvent(topic string, msg *message.Message, cfg PublisherConfig) outbox.Event {
	e := outbox.Event{Type: topic, Payload: msg.Payload}
	headers := make(map[string]string, len(msg.Metadata)+1)
	maps.Copy(headers, msg.Metadata)
	delete(headers, MetadataUUID)
	for _, f := range fieldKeys(&e) {
		if v, ok := headers[f.key]; ok {
			*f.field = v
			delete(headers, f.key)
		}
	}
	if _, set := msg.Metadata[MetadataPartitionKey]; !set && cfg.OrderKeyFunc != nil {
		e.PartitionKey = cfg.OrderKeyFunc(OrderKeyParams{Topic: topic, Message: msg})
	}
	carry := msg.UUID != ""
	if !cfg.NewEventIDs {
		e.ID, carry = EventID(msg.UUID)
	}
	if carry {
		headers[MetadataUUID] = msg.UUID
	}
	if len(headers) > 0 {
		e.Headers = headers
	}
	return e
}

// toMessage maps an event the dispatcher hands out to a message: the
// inverse of toEvent.
func toMessage(e outbox.Event) *message.Message {
	meta := make(message.Metadata, len(e.Headers)+5)
	maps.Copy(meta, e.Headers)
	msgUUID, ok := meta[MetadataUUID]
	if !ok {
		msgUUID = e.ID.String()
	}
	delete(meta, MetadataUUID)
	for _, f := range fieldKeys(&e) {
		if *f.field != "" {
			meta[f.key] = *f.field
		}
	}
	msg := message.NewMessage(msgUUID, e.Payload)
	msg.Metadata = meta
	return msg
}
