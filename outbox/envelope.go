package outbox

// The envelope: how publishers name an event's fields on the wire. They
// send them as CloudEvents 1.0 attributes in the binary content mode of
// the CloudEvents protocol binding of their broker, so that any
// CloudEvents consumer (an SDK, Knative, an event router) reads a
// pgoutbox event without knowing pgoutbox: the payload is the message
// body, and each attribute is one header, named with the binding's prefix
// ("ce_" for Kafka, "ce-" for NATS) and the attribute name below. The
// event's own Headers travel under their own names.
//
// Fields CloudEvents has no attribute for travel as extension attributes,
// whose names follow the CloudEvents rule (lowercase ASCII letters and
// digits). docs/envelope.md has the table for each broker.
const (
	// CloudEventsSpecVersion is the value of the specversion attribute.
	CloudEventsSpecVersion = "1.0"
	// DefaultSource is the source attribute of a publisher whose
	// configuration names none.
	DefaultSource = "/pgoutbox"

	// AttrID carries Event.ID in its canonical UUID text. Required.
	AttrID = "id"
	// AttrSource carries the publisher's configured source, a URI
	// reference naming the producing service. Required. It is not a field
	// of Event and is not decoded.
	AttrSource = "source"
	// AttrSpecVersion carries [CloudEventsSpecVersion]. Required.
	AttrSpecVersion = "specversion"
	// AttrType carries Event.Type. Required.
	AttrType = "type"
	// AttrTime carries Event.CreatedAt in UTC, RFC 3339 with nanoseconds,
	// when set.
	AttrTime = "time"
	// AttrSubject carries Event.AggregateID: the entity the event is
	// about, in the context of the source.
	AttrSubject = "subject"
	// AttrDataContentType carries Event.ContentType. The Kafka binding
	// sends it as the "content-type" header instead of with the prefix.
	AttrDataContentType = "datacontenttype"
	// AttrPartitionKey carries Event.PartitionKey: the attribute of the
	// CloudEvents Partitioning extension.
	AttrPartitionKey = "partitionkey"
	// AttrAggregateType carries Event.AggregateType (extension).
	AttrAggregateType = "aggregatetype"
	// AttrIdempotencyKey carries Event.IdempotencyKey (extension).
	AttrIdempotencyKey = "idempotencykey"
	// AttrAttempt carries Event.Attempt in decimal, when positive
	// (extension).
	AttrAttempt = "attempt"
)
