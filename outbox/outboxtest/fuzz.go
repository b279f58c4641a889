package outboxtest

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// AddEventSeeds adds seeds to f for a fuzz target of a publisher's
// encoding whose arguments after t are those of [FuzzEvent]: the events of
// [HeaderCases] (with up to two of their headers), and edge cases: an
// event with only a type, percent signs and quotes, NUL bytes and invalid UTF-8, reserved header
// names in several cases, a long header value, a zero ID, a negative
// attempt.
func AddEventSeeds(f *testing.F) {
	for _, c := range HeaderCases() {
		e := c.Event
		names := slices.Sorted(maps.Keys(e.Headers))
		k := [2]string{}
		v := [2]string{}
		for i := 0; i < len(names) && i < 2; i++ {
			k[i], v[i] = names[i], e.Headers[names[i]]
		}
		f.Add(e.ID[:], e.Type, e.AggregateType, e.AggregateID, e.PartitionKey, e.IdempotencyKey, e.ContentType,
			e.Payload, k[0], v[0], k[1], v[1], e.Attempt, e.CreatedAt.UnixNano())
	}
	id := uuid.MustParse("0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071")
	f.Add(id[:], "t", "", "", "", "", "", []byte(nil), "", "", "", "", 0, int64(0))
	f.Add(id[:], "50%25 off", "\"q\"", "7%", "%zz", "a%", "text/plain; x=\"%\"", []byte("p"), "x-pct", "%41", "", "", 1, int64(1))
	f.Add(id[:], "t\x00\xff", "\xc3", "", "", "", "", []byte("\x00"), "ce_ID", "x", "", "", -1, int64(-1))
	f.Add(id[:], "t", "", "", "", "", "", []byte("p"), "Content-Type", "x", "x", strings.Repeat("v", 4096), 1<<40, int64(1))
	f.Add(make([]byte, 16), "", "", "", "", "", "", []byte("p"), "ce_", "", "CE-id", "", 1, int64(0))
}

// FuzzEvent builds the event the arguments of a fuzz input stand for (see
// [AddEventSeeds]): the ID from the first 16 bytes of id (zero-padded),
// one header for each pair whose name or value is not empty, and
// CreatedAt from Unix nanoseconds (0 leaves it unset).
func FuzzEvent(id []byte, typ, aggType, aggID, pkey, idem, ct string, payload []byte,
	k1, v1, k2, v2 string, attempt int, createdAt int64,
) outbox.Event {
	e := outbox.Event{
		Type: typ, AggregateType: aggType, AggregateID: aggID, PartitionKey: pkey, IdempotencyKey: idem,
		ContentType: ct, Payload: payload, Attempt: attempt,
	}
	copy(e.ID[:], id)
	if createdAt != 0 {
		e.CreatedAt = time.Unix(0, createdAt)
	}
	for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
		if kv[0] == "" && kv[1] == "" {
			continue
		}
		if e.Headers == nil {
			e.Headers = make(map[string]string, 2)
		}
		e.Headers[kv[0]] = kv[1]
	}
	return e
}

// QuotedValue returns the payload or header value of e that msg, an error
// text about e, contains, or "" when it contains none. Values under 8
// bytes, which occur in texts by chance, are not looked for. Header names,
// which error texts may quote, are cut out of msg first, in Go's %q form
// and as they are, so that a value made of a name and a quote (which a
// fuzzer finds) does not count.
func QuotedValue(msg string, e outbox.Event) string {
	names := slices.Sorted(maps.Keys(e.Headers))
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) }) // longest first
	for _, name := range names {
		if name != "" {
			msg = strings.ReplaceAll(msg, strconv.Quote(name), "")
			msg = strings.ReplaceAll(msg, name, "")
		}
	}
	for _, v := range append(slices.Collect(maps.Values(e.Headers)), string(e.Payload)) {
		quoted := strconv.Quote(v)
		if len(v) >= 8 && (strings.Contains(msg, v) || strings.Contains(msg, quoted[1:len(quoted)-1])) {
			return v
		}
	}
	return ""
}
