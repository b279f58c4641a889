package natspub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Header names under which a message carries the event's fields. NATS
// header names are case-sensitive; these are written exactly as spelled
// here. Empty optional fields are left out.
const (
	// HeaderEventID carries Event.ID in its canonical UUID form. Always
	// set; the Publisher also sets [jetstream.MsgIDHeader] (Nats-Msg-Id) to
	// the same value, which the stream deduplicates on.
	HeaderEventID = "Pgoutbox-Event-Id"
	// HeaderEventType carries Event.Type. Always set.
	HeaderEventType = "Pgoutbox-Event-Type"
	// HeaderAggregateType carries Event.AggregateType.
	HeaderAggregateType = "Pgoutbox-Aggregate-Type"
	// HeaderAggregateID carries Event.AggregateID.
	HeaderAggregateID = "Pgoutbox-Aggregate-Id"
	// HeaderPartitionKey carries Event.PartitionKey as emitted. NATS has no
	// message key, so the fallback to AggregateID that Event documents for
	// broker keys is left to consumers, and Decode gives the event back
	// unchanged.
	HeaderPartitionKey = "Pgoutbox-Partition-Key"
	// HeaderIdempotencyKey carries Event.IdempotencyKey.
	HeaderIdempotencyKey = "Pgoutbox-Idempotency-Key"
	// HeaderContentType carries Event.ContentType.
	HeaderContentType = "Pgoutbox-Content-Type"
	// HeaderAttempt carries Event.Attempt in decimal, when positive.
	HeaderAttempt = "Pgoutbox-Attempt"
	// HeaderCreatedAt carries Event.CreatedAt in RFC 3339 with nanoseconds,
	// in UTC, when set.
	HeaderCreatedAt = "Pgoutbox-Created-At"

	// ReservedPrefix starts every header name of ours. A user header whose
	// name starts with it, or with "Nats-" (headers the NATS server acts
	// on, such as Nats-Msg-Id or Nats-Rollup), in any case, breaks the
	// header rule: the emitter rejects it, and the message fails with a
	// permanent error naming the header.
	ReservedPrefix = "Pgoutbox-"
)

// ErrNotAnEvent is returned by [Decode] for a message that does not carry
// a pgoutbox event (a missing or malformed header of ours).
var ErrNotAnEvent = errors.New("natspub: message is not a pgoutbox event")

// reserved reports whether a user header name collides with ours or with
// the server's.
func reserved(name string) bool {
	return hasPrefixFold(name, ReservedPrefix) || hasPrefixFold(name, "Nats-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// maxOwnHeaders is how many of our headers a message can carry, plus the
// Nats-Msg-Id that jetstream.WithMsgID adds.
const maxOwnHeaders = 10

// encodeHeaders returns the NATS headers for e, whose ID in text is id.
// The caller has checked e against the header rule (carriable), so every
// name is a token and every value arrives as it is; a user header keeps
// an empty value, while an empty field of the event is left out.
func encodeHeaders(e outbox.Event, id string) nats.Header {
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
			add(k, v)
		}
	}
	for k, v := range e.Headers {
		add(k, v)
	}
	set(HeaderEventID, id)
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

// carriable returns nil when NATS carries every field of e that travels as
// a header byte for byte, which is what the header rule Emit enforces
// says, and otherwise a *outbox.ValidationError naming the first field
// that breaks it (never quoting a value). Reserved names (ours, and the
// Nats-* headers the server acts on) break it too: letting one through
// would be ambiguous on decode or change what the server does.
func carriable(e outbox.Event) error {
	field, reason := outbox.HeaderProblem(e)
	if field == "" {
		return nil
	}
	return fmt.Errorf("natspub: the event cannot travel as NATS headers unchanged: %w",
		&outbox.ValidationError{Index: -1, Field: field, Reason: reason})
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
	id, err := uuid.Parse(h.Get(HeaderEventID))
	if err != nil {
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing or not a UUID", ErrNotAnEvent, HeaderEventID)
	}
	e := outbox.Event{
		ID:             id,
		Type:           h.Get(HeaderEventType),
		AggregateType:  h.Get(HeaderAggregateType),
		AggregateID:    h.Get(HeaderAggregateID),
		PartitionKey:   h.Get(HeaderPartitionKey),
		IdempotencyKey: h.Get(HeaderIdempotencyKey),
		ContentType:    h.Get(HeaderContentType),
		Payload:        data,
		Headers:        userHeaders(h),
	}
	if e.Type == "" {
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing", ErrNotAnEvent, HeaderEventType)
	}
	if e.Attempt, err = decodeAttempt(h.Get(HeaderAttempt)); err != nil {
		return outbox.Event{}, err
	}
	if e.CreatedAt, err = decodeTime(h.Get(HeaderCreatedAt)); err != nil {
		return outbox.Event{}, err
	}
	return e, nil
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
