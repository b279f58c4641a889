package outbox

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
)

// Format prints e, for every fmt verb (%v, %+v, %s, %#v and the rest),
// without the bytes that may hold secrets or personal data: the payload
// shows as its length, the headers as their sorted names, and the values
// of AggregateID, PartitionKey and IdempotencyKey (which travel as
// headers) not at all. ID, Type, AggregateType, ContentType, Attempt,
// Snoozes and CreatedAt show as they are. So an event that reaches a log
// line, an error's text or a recovered panic's message (the dispatcher
// records a handler's panic value with %v) gives away no payload; read
// the fields themselves to see them.
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
	)
}

func (e Event) headerNames() []string { return slices.Sorted(maps.Keys(e.Headers)) }
