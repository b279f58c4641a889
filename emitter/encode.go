package emitter

import (
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pguuid"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// columns holds a call's events column by column: the arrays the INSERT
// unnests. Empty optional strings stay empty here; the SQL turns them into
// NULL.
type columns struct {
	ids           []uuid.UUID
	callerIDs     []uuid.UUID  // the ids the caller set (not generated)
	idArgs        pguuid.Array // the ids as parameters (see pguuid)
	types         []string
	aggTypes      []string
	aggIDs        []string
	partitionKeys []string
	idemKeys      []string
	contentTypes  []string
	payloads      [][]byte
	headers       []string // JSON objects
	delays        []int64  // microseconds
	hasDelay      bool     // some delay is not zero
	payloadBytes  int      // total size of the payloads
}

// prepare validates every event and returns them as columns, with a UUIDv7
// in place of each zero ID. It writes nothing and does not modify events.
func (e *Emitter) prepare(events []outbox.Event) (*columns, error) {
	for i := range events {
		if err := e.validateEvent(i, &events[i]); err != nil {
			return nil, err
		}
	}
	if err := checkDuplicateIDs(events); err != nil {
		return nil, err
	}
	return encode(events)
}

// encode lays validated events out as columns.
func encode(events []outbox.Event) (*columns, error) {
	n := len(events)
	c := &columns{
		ids:           make([]uuid.UUID, n),
		idArgs:        make(pguuid.Array, n),
		types:         make([]string, n),
		aggTypes:      make([]string, n),
		aggIDs:        make([]string, n),
		partitionKeys: make([]string, n),
		idemKeys:      make([]string, n),
		contentTypes:  make([]string, n),
		payloads:      make([][]byte, n),
		headers:       make([]string, n),
		delays:        make([]int64, n),
	}
	for i := range events {
		ev := &events[i]
		id, err := eventID(ev.ID)
		if err != nil {
			return nil, err
		}
		if ev.ID != uuid.Nil {
			c.callerIDs = append(c.callerIDs, id)
		}
		c.ids[i], c.idArgs[i] = id, pguuid.Of(id)
		c.types[i] = ev.Type
		c.aggTypes[i] = ev.AggregateType
		c.aggIDs[i] = ev.AggregateID
		c.partitionKeys[i] = ev.PartitionKey
		c.idemKeys[i] = ev.IdempotencyKey
		c.contentTypes[i] = ev.ContentType
		c.payloads[i] = ev.Payload
		c.headers[i] = headersJSON(ev.Headers)
		c.delays[i] = int64(ev.Delay / time.Microsecond)
		c.hasDelay = c.hasDelay || c.delays[i] != 0
		c.payloadBytes += len(ev.Payload)
	}
	return c, nil
}

// addHeaders re-encodes the headers column from events (same order).
func (c *columns) addHeaders(events []outbox.Event) {
	for i := range events {
		c.headers[i] = headersJSON(events[i].Headers)
	}
}

// eventID returns id, or a fresh UUIDv7 when id is zero.
func eventID(id uuid.UUID) (uuid.UUID, error) {
	if id != uuid.Nil {
		return id, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, errtext.Wrap(err, "emit: new UUIDv7")
	}
	return id, nil
}

// headersJSON returns the headers as a JSON object of strings. The names and
// values are valid UTF-8 without NUL (validated before).
func headersJSON(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	size := 2
	for name, value := range h {
		size += len(name) + len(value) + 6 // quotes, colon, comma
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteByte('{')
	for name, value := range h {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		writeJSONString(&b, name)
		b.WriteByte(':')
		writeJSONString(&b, value)
	}
	b.WriteByte('}')
	return b.String()
}

// writeJSONString writes s as a JSON string: quote, backslash and control
// characters escaped, everything else (valid UTF-8) as is.
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
