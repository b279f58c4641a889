package outbox

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
)

// Format prints e, for the fmt verbs (%v, %+v, %s, %#v and the rest; not
// %p, for which fmt bypasses Format), without the bytes that may hold
// secrets or personal data: the payload shows as its length, the headers
// as their sorted names, and the values of AggregateID, PartitionKey and
// IdempotencyKey (which travel as headers) not at all. ID, Type,
// AggregateType, ContentType, Attempt, Snoozes and CreatedAt show as they
// are. So an event that reaches a log line, an error's text or a recovered
// panic's message (the dispatcher records a handler's panic value with %v)
// gives away no payload; read the fields themselves to see them. What
// Format cannot cover: an Event in an unexported struct field (fmt prints
// such fields raw), a type that embeds Event (it inherits Format and
// prints as its Event alone), and encoding/json, which marshals every
// field, the payload included (so does slog's JSON handler for a value
// that holds an Event, such as a dispatcher.Outcome, unless that value is
// a LogValuer too).
func (e Event) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "{ID:%s Type:%q AggregateType:%q ContentType:%q Payload:<%d bytes> Headers:%q Attempt:%d Snoozes:%d CreatedAt:%s}",
		e.ID, e.Type, e.AggregateType, e.ContentType, len(e.Payload), e.headerNames(), e.Attempt, e.Snoozes,
		e.CreatedAt.Format("2006-01-02T15:04:05.999999Z07:00"))
}

// LogValue implements slog.LogValuer: an event given to a logger as a
// value logs the fields Format prints, never the payload or header
// values, whatever the handler.
func (e Event) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", e.ID.String()),
		slog.String("type", e.Type),
		slog.String("aggregate_type", e.AggregateType),
		slog.String("content_type", e.ContentType),
		slog.Int("payload_bytes", len(e.Payload)),
		slog.Any("header_names", e.headerNames()),
		slog.Int("attempt", e.Attempt),
		slog.Int("snoozes", e.Snoozes),
		slog.Time("created_at", e.CreatedAt),
	)
}

func (e Event) headerNames() []string { return slices.Sorted(maps.Keys(e.Headers)) }
