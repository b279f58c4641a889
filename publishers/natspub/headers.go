package natspub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Header names under which a message carries the event's fields: the
// CloudEvents attributes of the envelope (see package outbox,
// [outbox.AttrID] and after) in the binary content mode of the CloudEvents
// NATS protocol binding, so that a CloudEvents consumer reads the message
// as a CloudEvent. As the binding requires, each value is percent-encoded
// (space, '"', '%', and every byte outside printable ASCII become %XX) and
// Decode percent-decodes it; the event's own Headers travel under their
// own names, unencoded. Names are written in lowercase exactly as spelled
// here and read in any case (the binding calls them case-insensitive).
// Empty optional fields are left out.
const (
	// HeaderPrefix starts the name of every attribute header, as the
	// binding prescribes. An event header whose name starts with it, or
	// with "Nats-" (headers the NATS server acts on, such as Nats-Msg-Id
	// or Nats-Rollup), in any case, breaks the header rule: the emitter
	// rejects it, and the message fails with a permanent error naming the
	// header.
	HeaderPrefix = "ce-"
	// HeaderEventID carries Event.ID in its canonical UUID form. Always
	// set; the Publisher also sets [jetstream.MsgIDHeader] (Nats-Msg-Id) to
	// the same value, which the stream deduplicates on.
	HeaderEventID = HeaderPrefix + outbox.AttrID
	// HeaderSource carries Config.Source. Always set; not decoded.
	HeaderSource = HeaderPrefix + outbox.AttrSource
	// HeaderSpecVersion carries outbox.CloudEventsSpecVersion. Always set.
	HeaderSpecVersion = HeaderPrefix + outbox.AttrSpecVersion
	// HeaderEventType carries Event.Type. Always set.
	HeaderEventType = HeaderPrefix + outbox.AttrType
	// HeaderCreatedAt carries Event.CreatedAt in RFC 3339 with nanoseconds,
	// in UTC, when set.
	HeaderCreatedAt = HeaderPrefix + outbox.AttrTime
	// HeaderAggregateID carries Event.AggregateID, as the CloudEvents
	// subject.
	HeaderAggregateID = HeaderPrefix + outbox.AttrSubject
	// HeaderContentType carries Event.ContentType.
	HeaderContentType = HeaderPrefix + outbox.AttrDataContentType
	// HeaderPartitionKey carries Event.PartitionKey as emitted. NATS has no
	// message key, so the fallback to AggregateID that Event documents for
	// broker keys is left to consumers, and Decode gives the event back
	// unchanged.
	HeaderPartitionKey = HeaderPrefix + outbox.AttrPartitionKey
	// HeaderAggregateType carries Event.AggregateType.
	HeaderAggregateType = HeaderPrefix + outbox.AttrAggregateType
	// HeaderIdempotencyKey carries Event.IdempotencyKey.
	HeaderIdempotencyKey = HeaderPrefix + outbox.AttrIdempotencyKey
	// HeaderAttempt carries Event.Attempt in decimal, when positive.
	HeaderAttempt = HeaderPrefix + outbox.AttrAttempt
)

// ErrNotAnEvent is returned by [Decode] for a message that does not carry
// a pgoutbox event (a missing or malformed header of ours).
var ErrNotAnEvent = errors.New("natspub: message is not a pgoutbox event")

// reserved reports whether a user header name collides with ours or with
// the server's.
func reserved(name string) bool {
	return hasPrefixFold(name, HeaderPrefix) || hasPrefixFold(name, "Nats-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// maxOwnHeaders is how many of our headers a message can carry, the
// Nats-Msg-Id among them.
const maxOwnHeaders = 12

// encodeHeaders returns the NATS headers for e, whose ID in text is id,
// from source, with Nats-Msg-Id = id, which the stream deduplicates on. The caller has checked e against the header rule
// (carriable), so every name is a token and every user header value
// arrives as it is, an empty one included; attribute values are
// percent-encoded, and an empty field of the event is left out.
func encodeHeaders(e outbox.Event, id, source string) nats.Header {
	h := make(nats.Header, maxOwnHeaders+len(e.Headers))
	// One backing array for the single-value slices saves an allocation
	// per header.
	vals := make([]string, 0, maxOwnHeaders+len(e.Headers))
	add := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set := func(k, v string) {
		if v != "" {
			add(k, percentEncode(v))
		}
	}
	for k, v := range e.Headers {
		add(k, v)
	}
	add(jetstream.MsgIDHeader, id)
	set(HeaderEventID, id)
	set(HeaderSource, source)
	set(HeaderSpecVersion, outbox.CloudEventsSpecVersion)
	set(HeaderEventType, e.Type)
	set(HeaderAggregateType, e.AggregateType)
	set(HeaderAggregateID, e.AggregateID)
	set(HeaderPartitionKey, e.PartitionKey)
	set(HeaderIdempotencyKey, e.IdempotencyKey)
	set(HeaderContentType, e.ContentType)
	if e.Attempt > 0 {
		set(HeaderAttempt, strconv.Itoa(e.Attempt))
	}
	if !e.CreatedAt.IsZero() {
		set(HeaderCreatedAt, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return h
}

// carriable returns nil when NATS carries every field of e (message i of
// its call) that travels as
// a header byte for byte, which is what the header rule Emit enforces
// says, and otherwise a *outbox.ValidationError naming the first field
// that breaks it (never quoting a value). Reserved names (ours, and the
// Nats-* headers the server acts on) break it too: letting one through
// would be ambiguous on decode or change what the server does.
func carriable(i int, e outbox.Event) error {
	field, reason := outbox.HeaderProblem(e)
	if field == "" {
		return nil
	}
	return &originError{context: "natspub: the event cannot travel as NATS headers unchanged",
		err: &outbox.ValidationError{Index: i, Field: field, Reason: reason}}
}

// Decode rebuilds the event a [Publisher] sent from a message read with
// the core nats API (a subscription, or a message a jetstream consumer
// handed out, through its underlying *nats.Msg). Payload aliases
// msg.Data. Headers holds every header that is neither ours nor the
// server's (Nats-*), with its first value, or is nil when there is none.
// Delay is not transmitted and decodes as zero.
//
// A message without a valid [HeaderEventID] or without [HeaderEventType],
// or with a malformed [HeaderAttempt] or [HeaderCreatedAt], returns an
// error wrapping [ErrNotAnEvent]; its text never quotes header values.
func Decode(msg *nats.Msg) (outbox.Event, error) {
	if msg == nil {
		return outbox.Event{}, fmt.Errorf("%w: nil message", ErrNotAnEvent)
	}
	return decode(msg.Header, msg.Data)
}

// DecodeJetStream is [Decode] for a message read with a jetstream
// consumer.
func DecodeJetStream(msg jetstream.Msg) (outbox.Event, error) {
	if msg == nil {
		return outbox.Event{}, fmt.Errorf("%w: nil message", ErrNotAnEvent)
	}
	return decode(msg.Headers(), msg.Data())
}

func decode(h nats.Header, data []byte) (outbox.Event, error) {
	attrs, err := attributes(h)
	if err != nil {
		return outbox.Event{}, err
	}
	id, err := uuid.Parse(attrs[HeaderEventID])
	if err != nil {
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing or not a UUID", ErrNotAnEvent, HeaderEventID)
	}
	e := outbox.Event{
		ID:             id,
		Type:           attrs[HeaderEventType],
		AggregateType:  attrs[HeaderAggregateType],
		AggregateID:    attrs[HeaderAggregateID],
		PartitionKey:   attrs[HeaderPartitionKey],
		IdempotencyKey: attrs[HeaderIdempotencyKey],
		ContentType:    attrs[HeaderContentType],
		Payload:        data,
		Headers:        userHeaders(h),
	}
	if e.Type == "" {
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing", ErrNotAnEvent, HeaderEventType)
	}
	if e.Attempt, err = decodeAttempt(attrs[HeaderAttempt]); err != nil {
		return outbox.Event{}, err
	}
	if e.CreatedAt, err = decodeTime(attrs[HeaderCreatedAt]); err != nil {
		return outbox.Event{}, err
	}
	return e, nil
}

// attributes returns the decoded values of the attribute headers of h,
// keyed by their lowercase names, whatever case they arrived in.
func attributes(h nats.Header) (map[string]string, error) {
	attrs := make(map[string]string, maxOwnHeaders)
	for k, v := range h {
		if !hasPrefixFold(k, HeaderPrefix) || len(v) == 0 {
			continue
		}
		name := strings.ToLower(k)
		value, ok := percentDecode(v[0])
		if !ok {
			return nil, fmt.Errorf("%w: header %s is not percent-encoded UTF-8", ErrNotAnEvent, name)
		}
		attrs[name] = value
	}
	return attrs, nil
}

func decodeAttempt(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: header %s is not a positive integer", ErrNotAnEvent, HeaderAttempt)
	}
	return n, nil
}

func decodeTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: header %s is not an RFC 3339 time", ErrNotAnEvent, HeaderCreatedAt)
	}
	return t, nil
}

// userHeaders returns the headers that are neither ours nor the server's.
func userHeaders(h nats.Header) map[string]string {
	var out map[string]string
	for k, v := range h {
		if reserved(k) || len(v) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = v[0]
	}
	return out
}

// percentEncode encodes v as the CloudEvents NATS binding requires of a
// header value: every byte of its UTF-8 outside printable ASCII, and the
// space, '"' and '%', becomes %XX with upper-case hex digits.
func percentEncode(v string) string {
	n := 0
	for i := range len(v) {
		if mustEncode(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hexDigits = "0123456789ABCDEF"
	buf := make([]byte, 0, len(v)+2*n)
	for i := range len(v) {
		c := v[i]
		if mustEncode(c) {
			buf = append(buf, '%', hexDigits[c>>4], hexDigits[c&0xf])
		} else {
			buf = append(buf, c)
		}
	}
	return string(buf)
}

func mustEncode(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// percentDecode undoes percentEncode, and also takes what the binding says
// a receiver must: a value in double quotes (with backslash escapes), and
// lower-case hex digits. It reports false for a malformed escape or a
// result that is not valid UTF-8.
func percentDecode(v string) (string, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			if v[i] == '\\' && i+1 < len(v)-1 {
				i++
			}
			b.WriteByte(v[i])
		}
		v = b.String()
	}
	if !strings.Contains(v, "%") {
		return v, utf8.ValidString(v)
	}
	buf := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			buf = append(buf, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", false
		}
		hi, ok1 := unhex(v[i+1])
		lo, ok2 := unhex(v[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		buf = append(buf, hi<<4|lo)
		i += 2
	}
	return string(buf), utf8.Valid(buf)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
