package outbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ContentTypeJSON is the content type [NewJSON] sets. Any content type equal
// to it or ending in "+json" declares a JSON payload, which Emit checks.
const ContentTypeJSON = "application/json"

// Event is one message a service emits inside its own transaction.
//
// Only Type is required. Emit fills ID with a fresh UUIDv7 when it is zero;
// once the transaction commits the ID never changes, through retries and
// redeliveries, so consumers use it as their idempotency key.
type Event struct {
	// ID identifies the event for its whole life. Zero means "choose a UUIDv7
	// at emit". A caller that sets it must keep it unique in the table.
	ID uuid.UUID
	// Type names what happened, e.g. "order.created". Required; 1 to 255
	// bytes of UTF-8 with no leading or trailing white space (any Unicode
	// white space) that follow the header rule (see the package
	// documentation). The dispatcher routes on it.
	Type string
	// AggregateType names the kind of entity the event is about, e.g.
	// "order". Optional, at most 255 bytes. AggregateType, AggregateID,
	// PartitionKey, IdempotencyKey and ContentType travel as broker
	// headers and follow the header rule (see the package documentation):
	// UTF-8 without NUL, CR or LF, not starting or ending with a space or
	// a tab.
	AggregateType string
	// AggregateID identifies that entity. Optional, at most 1024 bytes.
	AggregateID string
	// PartitionKey is the broker key / ordering key. Optional, at most 1024
	// bytes. Publishers fall back to AggregateID when it is empty.
	PartitionKey string
	// IdempotencyKey is a business-level deduplication key passed on to
	// consumers as metadata. The outbox does not enforce its uniqueness.
	// Optional, at most 1024 bytes.
	IdempotencyKey string
	// Headers are passed on to handlers and brokers, and follow the header
	// rule (see the package documentation): names are RFC 9110 tokens not
	// starting with ce_, ce- or Nats-, values are UTF-8 without NUL, CR
	// or LF that do not start or end with a space or a tab (empty is
	// fine). The emitter bounds their number and total size.
	Headers map[string]string
	// ContentType describes Payload, e.g. "application/json" or
	// "application/x-protobuf". Optional, at most 255 bytes, under the
	// header rule. A JSON content type (media type application/json or any
	// +json, in any case, parameters ignored) makes Emit check that
	// Payload is valid JSON without \u0000.
	ContentType string
	// Payload is the message body, stored as bytea and never logged. The
	// emitter bounds its size (900 KiB by default).
	Payload []byte
	// Delay postpones the first delivery: the event becomes due at the
	// database's now() plus Delay. Must not be negative.
	Delay time.Duration

	// Attempt is the 1-based number of the current delivery attempt. The
	// dispatcher sets it on the events it hands out; Emit ignores it.
	Attempt int
	// Snoozes is how often a handler gave the event back with [Snooze]
	// before this attempt (the row's snoozes column). The dispatcher sets
	// it on the events it hands out; Emit ignores it.
	Snoozes int
	// CreatedAt is the database time of the emitting transaction. The
	// dispatcher sets it on the events it hands out; Emit ignores it.
	CreatedAt time.Time
}

// NewJSON returns an event of the given type whose payload is v marshalled
// with encoding/json and whose content type is [ContentTypeJSON]. The
// marshalling error, if any, is returned wrapped and never contains v.
func NewJSON(eventType string, v any) (Event, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return Event{}, &ValidationError{Field: "Payload", Reason: "cannot be marshalled to JSON", Err: fmt.Errorf("%T: %w", v, errWithoutValue(err))}
	}
	return Event{Type: eventType, ContentType: ContentTypeJSON, Payload: payload}, nil
}

// errWithoutValue drops error texts that may quote the value being
// marshalled (json.MarshalerError and UnsupportedValueError do).
func errWithoutValue(err error) error {
	switch err.(type) {
	case *json.UnsupportedTypeError:
		return err
	default:
		return fmt.Errorf("json marshal failed (%T)", err)
	}
}
