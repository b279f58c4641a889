package emitter

import (
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// columns holds a call's validated events, their IDs and what decides the
// way they travel. For the INSERT it also holds them column by column, the
// arrays the INSERT unnests (filled by fill); COPY streams the events
// themselves and needs no arrays. Empty optional strings stay empty here;
// the SQL or the COPY source turns them into NULL.
type columns struct {
	events       []outbox.Event    // the caller's, never modified
	ids          []uuid.UUID       // the caller's ID where set, else a fresh UUIDv7
	trace        map[string]string // trace headers added to the events without a traceparent
	hasDelay     bool              // some delay is not zero
	payloadBytes int               // total size of the payloads

	// The INSERT's arrays, nil until fill (never filled for one event,
	// which goes as a VALUES row: rowArgs).
	idArgs        pgvalue.UUIDArray // the ids as parameters (see pgvalue)
	types         []string
	aggTypes      []string
	aggIDs        []string
	partitionKeys []string
	idemKeys      []string
	contentTypes  []string
	payloads      [][]byte
	headers       []string // JSON objects
	delays        []int64  // microseconds
}

// prepare validates every event and returns them as columns, with a UUIDv7
// in place of each zero ID; the INSERT's arrays are filled when the batch
// goes by INSERT. It writes nothing and does not modify events.
func (e *Emitter) prepare(events []outbox.Event) (*columns, error) {
	for i := range events {
		if err := e.validateEvent(i, &events[i]); err != nil {
			return nil, err
		}
	}
	if err := checkDuplicateIDs(events); err != nil {
		return nil, err
	}
	c, err := encode(events)
	if err == nil && !c.useCopy() && !c.single() {
		c.fill()
	}
	return c, err
}

// encode gives validated events their IDs and sums what decides the way
// they travel.
func encode(events []outbox.Event) (*columns, error) {
	c := &columns{events: events, ids: make([]uuid.UUID, len(events))}
	for i := range events {
		id, err := eventID(events[i].ID)
		if err != nil {
			return nil, err
		}
		c.ids[i] = id
		c.hasDelay = c.hasDelay || delayMicros(events[i].Delay) != 0
		c.payloadBytes += len(events[i].Payload)
	}
	return c, nil
}

// delayMicros returns a delay in whole microseconds, the precision of a
// PostgreSQL timestamp.
func delayMicros(d time.Duration) int64 {
	return int64(d / time.Microsecond)
}

// single reports whether the call has one event, which the INSERT sends
// as one VALUES row instead of arrays.
func (c *columns) single() bool { return len(c.events) == 1 }

// rowArgs returns the one event's parameters of insertOneSQL, in the
// order of arrayArgs: headers with the trace headers, then the delay
// unless noDelay (a log has no due time).
func (c *columns) rowArgs(noDelay bool) []any {
	ev := &c.events[0]
	args := []any{pgvalue.UUID(c.ids[0]), ev.Type, ev.AggregateType, ev.AggregateID,
		ev.PartitionKey, ev.IdempotencyKey, ev.ContentType, ev.Payload,
		headersJSON(ev.Headers, c.trace), delayMicros(ev.Delay)}
	if noDelay {
		return args[:len(args)-1]
	}
	return args
}

// arrayArgs returns the arrays as insertSQL's parameters, then the delays
// unless noDelay.
func (c *columns) arrayArgs(noDelay bool) []any {
	args := []any{c.idArgs, c.types, c.aggTypes, c.aggIDs, c.partitionKeys,
		c.idemKeys, c.contentTypes, c.payloads, c.headers, c.delays}
	if noDelay {
		return args[:len(args)-1]
	}
	return args
}

// fill lays the events out as the INSERT's arrays, headers with the trace
// headers (as set so far).
func (c *columns) fill() {
	n := len(c.events)
	c.idArgs = make(pgvalue.UUIDArray, n)
	c.types, c.aggTypes, c.aggIDs = make([]string, n), make([]string, n), make([]string, n)
	c.partitionKeys, c.idemKeys, c.contentTypes = make([]string, n), make([]string, n), make([]string, n)
	c.payloads, c.headers, c.delays = make([][]byte, n), make([]string, n), make([]int64, n)
	for i := range c.events {
		ev := &c.events[i]
		c.idArgs[i] = pgvalue.UUID(c.ids[i])
		c.types[i] = ev.Type
		c.aggTypes[i] = ev.AggregateType
		c.aggIDs[i] = ev.AggregateID
		c.partitionKeys[i] = ev.PartitionKey
		c.idemKeys[i] = ev.IdempotencyKey
		c.contentTypes[i] = ev.ContentType
		c.payloads[i] = ev.Payload
		c.headers[i] = headersJSON(ev.Headers, c.trace)
		c.delays[i] = delayMicros(ev.Delay)
	}
}

// addTrace adds the trace headers th (nil: none) to every event without a
// traceparent of its own; the caller's maps are not modified. Arrays
// already filled are encoded again.
func (c *columns) addTrace(th map[string]string) {
	c.trace = th
	if c.headers == nil {
		return
	}
	for i := range c.events {
		c.headers[i] = headersJSON(c.events[i].Headers, th)
	}
}

// callerIDs returns the IDs among ids that the caller set in events (not
// generated), for naming a duplicate.
func callerIDs(events []outbox.Event, ids []uuid.UUID) []uuid.UUID {
	var out []uuid.UUID
	for i := range events {
		if events[i].ID != uuid.Nil {
			out = append(out, ids[i])
		}
	}
	return out
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

// headersJSON returns the headers as a JSON object of strings, with the
// trace headers th added unless h carries a traceparent of its own. The
// names and values are valid UTF-8 without NUL (validated before).
func headersJSON(h, th map[string]string) string {
	th = traceFor(h, th)
	if len(h) == 0 && len(th) == 0 {
		return "{}"
	}
	var stack [512]byte // enough for most; the string is the one allocation
	return string(appendHeaders(stack[:0], h, th))
}

// traceFor returns the trace headers th that headers h get: none when h
// carries a traceparent of its own.
func traceFor(h, th map[string]string) map[string]string {
	if _, own := h[HeaderTraceparent]; own {
		return nil
	}
	return th
}

// appendHeaders appends h as a JSON object of strings to b, with th's
// headers added over it (th from traceFor).
func appendHeaders(b []byte, h, th map[string]string) []byte {
	b = append(b, '{')
	start := len(b)
	for name, value := range h {
		if _, traced := th[name]; !traced {
			b = appendHeader(b, name, value, len(b) == start)
		}
	}
	for name, value := range th {
		b = appendHeader(b, name, value, len(b) == start)
	}
	return append(b, '}')
}

// appendHeader appends one "name":"value" member, after a comma unless it
// is the first.
func appendHeader(b []byte, name, value string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = appendJSONString(b, name)
	b = append(b, ':')
	return appendJSONString(b, value)
}

// appendJSONString appends s as a JSON string: quote, backslash and
// control characters escaped, everything else (valid UTF-8) as is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '"' && c != '\\' && c >= 0x20 {
			continue
		}
		b = append(b, s[start:i]...)
		if c < 0x20 {
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, '\\', c)
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
