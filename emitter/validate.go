package emitter

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Length limits of the text fields of an event, in bytes.
const (
	maxTypeLen = 255  // Type, AggregateType, ContentType
	maxKeyLen  = 1024 // AggregateID, PartitionKey, IdempotencyKey
)

// invalid returns the validation error of event i. Reasons never quote
// payload bytes or header values.
func invalid(i int, field, reason string) *outbox.ValidationError {
	return &outbox.ValidationError{Index: i, Field: field, Reason: reason}
}

// validateEvent checks event i against the limits. It reads the event only.
func (e *Emitter) validateEvent(i int, ev *outbox.Event) error {
	if reason := typeProblem(ev.Type); reason != "" {
		return invalid(i, "Type", reason)
	}
	texts := [...]struct {
		field, value string
		max          int
	}{
		{"AggregateType", ev.AggregateType, maxTypeLen},
		{"AggregateID", ev.AggregateID, maxKeyLen},
		{"PartitionKey", ev.PartitionKey, maxKeyLen},
		{"IdempotencyKey", ev.IdempotencyKey, maxKeyLen},
		{"ContentType", ev.ContentType, maxTypeLen},
	}
	for _, t := range texts {
		if reason := pgvalue.TextProblem(t.value, t.max); reason != "" {
			return invalid(i, t.field, reason)
		}
	}
	if ev.Delay < 0 {
		return invalid(i, "Delay", "is negative")
	}
	if ev.Delay > 0 && e.cfg.Kind == outbox.KindLog {
		err := invalid(i, "Delay", "must be zero for a log")
		err.Err = ErrDelayOnLog
		return err
	}
	if reason := e.payloadProblem(ev); reason != "" {
		return invalid(i, "Payload", reason)
	}
	if reason := e.headersProblem(ev.Headers); reason != "" {
		return invalid(i, "Headers", reason)
	}
	// What travels as a broker header must arrive byte for byte.
	if field, reason := outbox.HeaderProblem(*ev); field != "" {
		return invalid(i, field, reason)
	}
	return nil
}

// typeProblem says what is wrong with an event type, or "". The header
// rule, checked later, covers the rest.
func typeProblem(t string) string {
	if t == "" {
		return "is empty"
	}
	if reason := pgvalue.TextProblem(t, maxTypeLen); reason != "" {
		return reason
	}
	first, _ := utf8.DecodeRuneInString(t)
	last, _ := utf8.DecodeLastRuneInString(t)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		if strings.TrimSpace(t) == "" {
			return "is only white space"
		}
		return "has leading or trailing white space"
	}
	return ""
}

// payloadProblem checks the payload's presence, size and, when the content
// type declares JSON, its syntax.
func (e *Emitter) payloadProblem(ev *outbox.Event) string {
	switch {
	case len(ev.Payload) == 0 && !e.cfg.AllowEmptyPayload:
		return "is empty"
	case len(ev.Payload) == 0:
		return ""
	case len(ev.Payload) > e.cfg.MaxPayloadBytes:
		return fmt.Sprintf("is %d bytes, more than the limit of %d", len(ev.Payload), e.cfg.MaxPayloadBytes)
	case !isJSON(ev.ContentType):
		return ""
	case !json.Valid(ev.Payload):
		return "is not valid JSON (the content type declares JSON)"
	case hasNULEscape(ev.Payload):
		return `holds the JSON escape \u0000, which PostgreSQL's jsonb and many consumers reject`
	}
	return ""
}

// isJSON reports whether a content type declares JSON: its media type is
// application/json or ends in +json (RFC 6839), in any case and whatever its
// parameters.
func isJSON(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	media = strings.TrimSpace(media)
	const suffix = "+json"
	return strings.EqualFold(media, outbox.ContentTypeJSON) ||
		len(media) > len(suffix) && strings.EqualFold(media[len(media)-len(suffix):], suffix)
}

// hasNULEscape reports whether valid JSON holds the escape \u0000. In valid
// JSON a backslash only starts an escape inside a string, so skipping the
// character after each backslash is enough to tell \u0000 from \\u0000.
func hasNULEscape(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' {
			continue
		}
		if i+5 < len(doc) && doc[i+1] == 'u' && string(doc[i+2:i+6]) == "0000" {
			return true
		}
		i++
	}
	return false
}

// headersProblem checks the number and total size of headers; the header
// rule checks their names and values. Reasons never quote a value.
func (e *Emitter) headersProblem(h map[string]string) string {
	if len(h) == 0 {
		return ""
	}
	if e.cfg.NoHeaders {
		return "are not allowed (NoHeaders is set)"
	}
	if len(h) > e.cfg.MaxHeaders {
		return fmt.Sprintf("are %d, more than the limit of %d", len(h), e.cfg.MaxHeaders)
	}
	total := 0
	for name, value := range h {
		total += len(name) + len(value)
	}
	if total > e.cfg.MaxHeaderBytes {
		return fmt.Sprintf("total %d bytes, more than the limit of %d", total, e.cfg.MaxHeaderBytes)
	}
	return ""
}

// checkDuplicateIDs rejects a call whose caller-set IDs repeat. Generated
// UUIDv7s are not checked: they are unique by construction.
func checkDuplicateIDs(events []outbox.Event) error {
	var seen map[uuid.UUID]int
	for i := range events {
		id := events[i].ID
		if id == uuid.Nil {
			continue
		}
		if seen == nil {
			seen = make(map[uuid.UUID]int)
		}
		if first, dup := seen[id]; dup {
			return invalid(i, "ID", fmt.Sprintf("repeats the ID of event %d", first))
		}
		seen[id] = i
	}
	return nil
}
