package pgoutboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Want describes the events an assertion looks for. Every field left at
// its zero value matches anything; every field set must match, so a row
// matches a Want when it matches all of them. New fields will be added
// the same way, matching anything while zero.
type Want struct {
	// Type is the event type. Empty matches any type.
	Type string
	// ID is the event's ID. Zero matches any ID.
	ID uuid.UUID
	// AggregateType must equal the event's aggregate type, when set.
	AggregateType string
	// AggregateID must equal the event's aggregate ID, when set.
	AggregateID string
	// PartitionKey must equal the event's partition key, when set.
	PartitionKey string
	// IdempotencyKey must equal the event's idempotency key, when set.
	IdempotencyKey string
	// ContentType must equal the event's content type, when set.
	ContentType string
	// Headers must each be present on the event with the same value (an
	// empty value too). Other headers the event has, such as the trace
	// context the emitter adds, do not matter.
	Headers map[string]string
	// Payload, when not nil, must equal the event's payload byte for byte.
	// A non-nil empty slice matches an empty payload only.
	Payload []byte
	// PayloadJSON, when not nil, is marshalled with encoding/json and must
	// be JSON-equal to the event's payload: the same value whatever the
	// spacing, key order or number spelling (1, 1.0 and 1e0 are equal).
	// A struct, a map or a json.RawMessage holding JSON text all work; a
	// Go string is the JSON string it marshals to.
	PayloadJSON any
	// Status is the row's status, e.g. outbox.StatusSent after a
	// dispatcher ran. Empty matches any status.
	Status outbox.Status
}

// row is one outbox row as the assertions see it.
type row struct {
	event  outbox.Event
	seq    int64
	status outbox.Status
}

// matcher is a Want prepared for matching: PayloadJSON marshalled and
// decoded once.
type matcher struct {
	want     Want
	jsonWant any
}

// newMatcher prepares w, or says why it cannot be used.
func newMatcher(w Want) (matcher, error) {
	m := matcher{want: w}
	if w.PayloadJSON == nil {
		return m, nil
	}
	doc, err := json.Marshal(w.PayloadJSON)
	if err != nil {
		return m, fmt.Errorf("Want.PayloadJSON (%T) cannot be marshalled to JSON: %w", w.PayloadJSON, err)
	}
	if m.jsonWant, err = decodeJSON(doc); err != nil {
		return m, fmt.Errorf("Want.PayloadJSON (%T) is not valid JSON: %w", w.PayloadJSON, err)
	}
	return m, nil
}

// differences lists, in field order, how r differs from the Want; none
// means r matches.
func (m matcher) differences(r row) []string {
	w, e := m.want, r.event
	var out []string
	text := func(field, got, want string) {
		if want != "" && got != want {
			out = append(out, fmt.Sprintf("%s %q, want %q", field, got, want))
		}
	}
	text("Type", e.Type, w.Type)
	if w.ID != uuid.Nil && e.ID != w.ID {
		out = append(out, fmt.Sprintf("ID %s, want %s", e.ID, w.ID))
	}
	text("AggregateType", e.AggregateType, w.AggregateType)
	text("AggregateID", e.AggregateID, w.AggregateID)
	text("PartitionKey", e.PartitionKey, w.PartitionKey)
	text("IdempotencyKey", e.IdempotencyKey, w.IdempotencyKey)
	text("ContentType", e.ContentType, w.ContentType)
	out = append(out, headerDifferences(e.Headers, w.Headers)...)
	if w.Payload != nil && !bytes.Equal(e.Payload, w.Payload) {
		out = append(out, "Payload not equal to "+excerpt(w.Payload))
	}
	if d := m.jsonDifference(e.Payload); d != "" {
		out = append(out, d)
	}
	text("Status", string(r.status), string(w.Status))
	return out
}

// headerDifferences names each wanted header the event lacks or holds
// with another value, in name order.
func headerDifferences(got, want map[string]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		v, ok := got[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("header %q missing, want %q", name, want[name]))
		case v != want[name]:
			out = append(out, fmt.Sprintf("header %q is %q, want %q", name, v, want[name]))
		}
	}
	return out
}

// jsonDifference says how payload differs from PayloadJSON; "" when it
// does not, or when PayloadJSON is not set.
func (m matcher) jsonDifference(payload []byte) string {
	if m.want.PayloadJSON == nil {
		return ""
	}
	got, err := decodeJSON(payload)
	if err != nil {
		return "Payload is not JSON, want JSON-equal to " + m.wantJSON()
	}
	if !reflect.DeepEqual(got, m.jsonWant) {
		return "Payload not JSON-equal to " + m.wantJSON()
	}
	return ""
}

// wantJSON is PayloadJSON marshalled, cut like a payload excerpt.
func (m matcher) wantJSON() string {
	doc, _ := json.Marshal(m.want.PayloadJSON) // newMatcher checked it
	return excerpt(doc)
}

// decodeJSON decodes one JSON document into maps, slices, strings,
// booleans, nil and numbers in a canonical spelling, so that two
// documents with the same value decode to deeply equal results.
func decodeJSON(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return canonical(v), nil
}

// canonical replaces every json.Number in v by the exact rational it
// spells, as a string.
func canonical(v any) any {
	switch x := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(x)); ok {
			return r.RatString()
		}
		return string(x)
	case map[string]any:
		for k, e := range x {
			x[k] = canonical(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonical(e)
		}
	}
	return v
}

// describe prints the fields of w that are set, e.g.
// {Type "order.placed", AggregateID "42"}.
func (w Want) describe() string {
	var parts []string
	add := func(field, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s %q", field, v))
		}
	}
	add("Type", w.Type)
	if w.ID != uuid.Nil {
		parts = append(parts, "ID "+w.ID.String())
	}
	add("AggregateType", w.AggregateType)
	add("AggregateID", w.AggregateID)
	add("PartitionKey", w.PartitionKey)
	add("IdempotencyKey", w.IdempotencyKey)
	add("ContentType", w.ContentType)
	for _, name := range slices.Sorted(maps.Keys(w.Headers)) {
		parts = append(parts, fmt.Sprintf("header %q=%q", name, w.Headers[name]))
	}
	if w.Payload != nil {
		parts = append(parts, "Payload "+excerpt(w.Payload))
	}
	if w.PayloadJSON != nil {
		doc, _ := json.Marshal(w.PayloadJSON)
		parts = append(parts, "PayloadJSON "+excerpt(doc))
	}
	add("Status", string(w.Status))
	if len(parts) == 0 {
		return "{any event}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
