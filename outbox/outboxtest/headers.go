package outboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// HeaderCase is an event built to probe the header rule (see package
// outbox): one edge of it, applied to [NewEvent].
type HeaderCase struct {
	// Name says what the case probes, e.g. "HeaderNameHasSlash".
	Name string
	// Event is the event, with a fresh ID.
	Event outbox.Event
	// Field is the field that breaks the rule, as outbox.HeaderProblem
	// and Emit name it, or "" when the event follows the rule.
	Field string
}

// HeaderCases returns events at the edges of the header rule. Those whose
// Field is "" follow it, with every field that travels as a broker header
// set to values at its edge (inner white space, control characters,
// Unicode spaces at either end, non-ASCII text, empty header values, every
// token character in names, the longest keys Emit takes): Emit accepts
// them, and every publisher must carry them byte for byte. The others
// break it, as a row written around Emit may: Emit rejects them, and a
// publisher must carry them byte for byte or fail them permanently with an
// error matching outbox.ErrInvalidEvent.
func HeaderCases() []HeaderCase {
	long := strings.Repeat("0123456789abcdef", 64) // 1,024 bytes, the longest key Emit takes
	header := func(name, value string) func(e *outbox.Event) {
		return func(e *outbox.Event) { e.Headers = map[string]string{name: value} }
	}
	edits := []struct {
		name, field string
		edit        func(e *outbox.Event)
	}{
		{"ControlCharacters", "", func(e *outbox.Event) {
			e.AggregateID, e.PartitionKey = "\x01ctl\x7f", "\va\fb\v"
			e.Headers = map[string]string{"x-ctl": "\x1b[0m", "x-nel": "\u0085nel\u2028"}
		}},
		{"EmptyHeaderValue", "", header("x-empty", "")},
		{"InnerWhiteSpace", "", func(e *outbox.Event) {
			e.Type, e.AggregateID, e.IdempotencyKey = "order  created", "a  b", "key-1 \t key-2"
			e.Headers = map[string]string{"x-inner": "a \t b"}
		}},
		{"LongValues", "", func(e *outbox.Event) {
			e.AggregateID, e.PartitionKey, e.IdempotencyKey = long, "p"+long[1:], "i"+long[1:]
			e.Headers = map[string]string{"x-long": strings.Repeat(long, 8)}
		}},
		{"OnlyType", "", func(e *outbox.Event) {
			*e = outbox.Event{ID: e.ID, Type: e.Type, Payload: e.Payload, Attempt: e.Attempt, CreatedAt: e.CreatedAt}
		}},
		{"Punctuation", "", func(e *outbox.Event) {
			e.AggregateID, e.ContentType = `agg:2; x="y"`, `application/json; charset="utf-8"`
			e.Headers = map[string]string{"x-colon": ": a: b", "x-quote": `<&>"\`}
		}},
		{"TokenNames", "", func(e *outbox.Event) {
			e.Headers = map[string]string{"!#$%&'*+-.^_`|~": "all", "0": "digit", "X-Case": "upper", "x-case": "lower"}
		}},
		{"Unicode", "", func(e *outbox.Event) {
			e.Type, e.AggregateType, e.AggregateID = "commande.créée", "τύπος", "注文-7"
			e.PartitionKey, e.IdempotencyKey = "clé ✓", "ключ"
			e.Headers = map[string]string{"x-utf8": "日本語 ✓"}
		}},
		{"UnicodeSpaceAround", "", func(e *outbox.Event) {
			e.AggregateType, e.AggregateID = "\u00a0order\u00a0", "\u3000id\u3000"
		}},

		{"AggregateIDHasLF", "AggregateID", func(e *outbox.Event) { e.AggregateID = "line1\nline2" }},
		{"AggregateIDSpaceAround", "AggregateID", func(e *outbox.Event) { e.AggregateID = " agg-2 " }},
		{"HeaderNameEmpty", "Headers", header("", "v")},
		{"HeaderNameHasColon", "Headers", header("a:b", "v")},
		{"HeaderNameHasSlash", "Headers", header("x/y", "v")},
		{"HeaderNameHasSpace", "Headers", header("has space", "v")},
		{"HeaderNameNATSPrefix", "Headers", header("Nats-Rollup", "sub")},
		{"HeaderNameNonASCII", "Headers", header("héader", "v")},
		{"HeaderNameCloudEventsKafka", "Headers", header("ce_type", "other")},
		{"HeaderNameCloudEventsNATS", "Headers", header("Ce-Type", "other")},
		{"HeaderNameContentType", "Headers", header("content-type", "text/plain")},
		{"HeaderNameStatus", "Headers", header("status", "404")}, // with no body NATS hides it
		{"HeaderNameDescription", "Headers", header("Description", "v")},
		{"HeaderValueSpaceAround", "Headers", header("x-h", "  "+marker+"  ")},
		{"IdempotencyKeyEndsInCRLF", "IdempotencyKey", func(e *outbox.Event) { e.IdempotencyKey = "key-1\r\n" }},
		{"TypeHasCRLF", "Type", func(e *outbox.Event) { e.Type = "order\r\ncreated" }},
	}
	cases := make([]HeaderCase, len(edits))
	for i, c := range edits {
		e := NewEvent(i)
		c.edit(&e)
		cases[i] = HeaderCase{Name: c.name, Event: e, Field: c.field}
	}
	return cases
}

func testHeaderRule(t *testing.T, h Harness) {
	var carried, refused []HeaderCase
	for _, c := range HeaderCases() {
		if c.Field == "" {
			carried = append(carried, c)
		} else {
			refused = append(refused, c)
		}
	}
	t.Run("Carried", func(t *testing.T) {
		p, dest := h.NewPublisher(t), h.NewDestination(t)
		for i, err := range publish(t, p, context.Background(), caseMessages(dest, carried)) {
			if err != nil {
				t.Fatalf("%s: %v", carried[i].Name, err)
			}
		}
		requireArrivedIntact(t, h, dest, carried)
	})
	t.Run("Refused", func(t *testing.T) {
		p, dest := h.NewPublisher(t), h.NewDestination(t)
		errs := publish(t, p, context.Background(), caseMessages(dest, refused))
		var sent []HeaderCase
		for i, err := range errs {
			switch {
			case err == nil:
				sent = append(sent, refused[i])
			case !outbox.IsPermanent(err) || !errors.Is(err, outbox.ErrInvalidEvent):
				t.Errorf("%s: want success or a permanent error matching outbox.ErrInvalidEvent, got %v", refused[i].Name, err)
			default:
				checkClean(t, err)
			}
		}
		requireArrivedIntact(t, h, dest, sent)
	})
}

// requireArrivedIntact receives what arrived at dest and checks that the
// events of cases, reported sent, are among it byte for byte.
func requireArrivedIntact(t *testing.T, h Harness, dest string, cases []HeaderCase) {
	t.Helper()
	got := receive(t, h, dest, len(cases))
	for _, c := range cases {
		r, ok := find(got, c.Event)
		if !ok {
			t.Fatalf("%s: reported sent, never arrived", c.Name)
		}
		if diff := EventDiff(c.Event, r.Event); diff != "" {
			t.Errorf("%s: reported sent, arrived changed: %s", c.Name, diff)
		}
	}
}

func caseMessages(dest string, cases []HeaderCase) []outbox.Message {
	msgs := make([]outbox.Message, len(cases))
	for i, c := range cases {
		msgs[i] = outbox.Message{Destination: dest, Event: c.Event}
	}
	return msgs
}

func find(got []Received, want outbox.Event) (Received, bool) {
	for _, r := range got {
		if r.Event.ID == want.ID {
			return r, true
		}
	}
	return Received{}, false
}

// EventDiff describes the first field a publisher transmits in which got,
// an event decoded from the broker, differs from want, the event
// published, or returns "" when there is none. Delay is not transmitted;
// nil and empty headers and payloads are the same.
func EventDiff(want, got outbox.Event) string {
	fields := []struct {
		name      string
		want, got string
	}{
		{"Type", want.Type, got.Type},
		{"AggregateType", want.AggregateType, got.AggregateType},
		{"AggregateID", want.AggregateID, got.AggregateID},
		{"PartitionKey", want.PartitionKey, got.PartitionKey},
		{"IdempotencyKey", want.IdempotencyKey, got.IdempotencyKey},
		{"ContentType", want.ContentType, got.ContentType},
	}
	for _, f := range fields {
		if f.want != f.got {
			return fmt.Sprintf("%s = %q, want %q", f.name, f.got, f.want)
		}
	}
	switch {
	case !bytes.Equal(want.Payload, got.Payload):
		return fmt.Sprintf("payload differs (%d bytes, want %d)", len(got.Payload), len(want.Payload))
	case want.Attempt != got.Attempt:
		return fmt.Sprintf("Attempt = %d, want %d", got.Attempt, want.Attempt)
	case want.ID != got.ID:
		return fmt.Sprintf("ID = %s, want %s", got.ID, want.ID)
	case !want.CreatedAt.Equal(got.CreatedAt):
		return fmt.Sprintf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	case !maps.Equal(want.Headers, got.Headers):
		return fmt.Sprintf("headers %q, want %q", sortedPairs(got.Headers), sortedPairs(want.Headers))
	}
	return ""
}

func sortedPairs(h map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, k+": "+h[k])
	}
	return out
}
