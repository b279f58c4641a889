package amqppub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Header names under which a message carries the event's fields: the
// CloudEvents attributes of the envelope (see package outbox,
// [outbox.AttrID] and after) in the binary content mode of the CloudEvents
// AMQP protocol binding, whose application properties RabbitMQ maps to
// and from AMQP 0-9-1 headers. Values are AMQP strings, carried byte for
// byte, so unlike the NATS binding nothing is percent-encoded. The
// datacontenttype attribute travels, as the binding says, as the message's
// content_type property, not as a header. The event's own Headers travel
// under their own names as strings. Names are written exactly as spelled
// here and read in any case. Empty optional fields are left out.
const (
	// HeaderPrefix starts the name of every attribute header: the prefix
	// the CloudEvents AMQP binding gives application properties. An event
	// header whose name starts with it (any case), or is "CC" or "BCC"
	// (headers RabbitMQ routes on, sender-selected distribution), breaks
	// the header rule: the message fails with a permanent error naming
	// the header.
	HeaderPrefix = "cloudEvents_"
	// HeaderEventID carries Event.ID in its canonical UUID form, as does
	// the message_id property. Always set.
	HeaderEventID = HeaderPrefix + outbox.AttrID
	// HeaderSource carries Config.Source. Always set; not decoded.
	HeaderSource = HeaderPrefix + outbox.AttrSource
	// HeaderSpecVersion carries outbox.CloudEventsSpecVersion. Always set.
	HeaderSpecVersion = HeaderPrefix + outbox.AttrSpecVersion
	// HeaderEventType carries Event.Type, as does the type property.
	// Always set.
	HeaderEventType = HeaderPrefix + outbox.AttrType
	// HeaderCreatedAt carries Event.CreatedAt in RFC 3339 with nanoseconds,
	// in UTC, when set; the timestamp property carries it in seconds.
	HeaderCreatedAt = HeaderPrefix + outbox.AttrTime
	// HeaderAggregateID carries Event.AggregateID, as the CloudEvents
	// subject.
	HeaderAggregateID = HeaderPrefix + outbox.AttrSubject
	// HeaderPartitionKey carries Event.PartitionKey as emitted.
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
var ErrNotAnEvent = errors.New("amqppub: message is not a pgoutbox event")

// maxOwnHeaders is how many headers of ours a message can carry.
const maxOwnHeaders = 10

// reserved reports whether a user header name collides with ours or with
// a header RabbitMQ routes on.
func reserved(name string) bool {
	return hasPrefixFold(name, HeaderPrefix) || strings.EqualFold(name, "CC") || strings.EqualFold(name, "BCC")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// buildPublishing returns the AMQP message for e, message i of its call,
// bound for r; or a permanent cause: a zero event ID, a route, type or
// content type longer than an AMQP short string, a field that breaks the
// header rule, a payload over cfg.MaxMessageSize.
func buildPublishing(i int, r Route, e outbox.Event, cfg Config) (amqp.Publishing, error) {
	switch {
	case len(r.Exchange) > MaxShortString || len(r.RoutingKey) > MaxShortString:
		return amqp.Publishing{}, routeError(r, errors.New("the exchange and the routing key must be at most 255 bytes each"))
	case e.ID == uuid.Nil:
		return amqp.Publishing{}, routeError(r, errors.New("event has no ID (it is the message_id)"))
	}
	if err := carriable(i, r, e); err != nil {
		return amqp.Publishing{}, err
	}
	if len(e.Payload) > cfg.MaxMessageSize {
		return amqp.Publishing{}, &originError{context: routeError(r, errors.New("too large")).Error(), err: &outbox.ValidationError{
			Index: i, Field: "Payload", Err: ErrMessageTooLarge,
			Reason: fmt.Sprintf("is %d bytes, more than the maximum message size of %d bytes (Config.MaxMessageSize)", len(e.Payload), cfg.MaxMessageSize),
		}}
	}
	id := e.ID.String()
	pub := amqp.Publishing{
		Headers:      encodeHeaders(e, id, cfg.Source),
		ContentType:  e.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Type:         e.Type,
		Body:         e.Payload,
	}
	if !e.CreatedAt.IsZero() {
		pub.Timestamp = e.CreatedAt
	}
	return pub, nil
}

// carriable returns nil when AMQP carries every field of e (message i of
// its call) that travels as a header or short-string property under the
// header rule Emit enforces, and otherwise an *outbox.ValidationError
// naming the first field that breaks it, never quoting a value. Reserved
// names break it too, as do a type, content type or header name longer
// than an AMQP short string (255 bytes).
func carriable(i int, r Route, e outbox.Event) error {
	field, reason := outbox.HeaderProblem(e)
	if field == "" {
		field, reason = amqpProblem(e)
	}
	if field == "" {
		return nil
	}
	return &originError{context: routeError(r, errors.New("the event cannot travel as AMQP headers unchanged")).Error(),
		err: &outbox.ValidationError{Index: i, Field: field, Reason: reason}}
}

// amqpProblem names the first field of e that AMQP 0-9-1 cannot carry
// although it follows the header rule, and why.
func amqpProblem(e outbox.Event) (field, reason string) {
	switch {
	case len(e.Type) > MaxShortString:
		return "Type", "is longer than 255 bytes, the longest AMQP type property"
	case len(e.ContentType) > MaxShortString:
		return "ContentType", "is longer than 255 bytes, the longest AMQP content_type property"
	}
	for name := range e.Headers {
		if reserved(name) {
			return "Headers", fmt.Sprintf("name %q is reserved (%s*, CC and BCC, any case)", name, HeaderPrefix)
		}
		if len(name) > MaxShortString {
			return "Headers", fmt.Sprintf("name of %d bytes is longer than 255 bytes, the longest AMQP header name", len(name))
		}
	}
	return "", ""
}

// encodeHeaders returns the AMQP headers for e, whose ID in text is id,
// from source: the event's own headers, then our attributes; an empty
// field of the event is left out.
func encodeHeaders(e outbox.Event, id, source string) amqp.Table {
	h := make(amqp.Table, maxOwnHeaders+len(e.Headers))
	for k, v := range e.Headers {
		h[k] = v
	}
	set := func(k, v string) {
		if v != "" {
			h[k] = v
		}
	}
	set(HeaderEventID, id)
	set(HeaderSource, source)
	set(HeaderSpecVersion, outbox.CloudEventsSpecVersion)
	set(HeaderEventType, e.Type)
	set(HeaderAggregateType, e.AggregateType)
	set(HeaderAggregateID, e.AggregateID)
	set(HeaderPartitionKey, e.PartitionKey)
	set(HeaderIdempotencyKey, e.IdempotencyKey)
	if e.Attempt > 0 {
		set(HeaderAttempt, strconv.Itoa(e.Attempt))
	}
	if !e.CreatedAt.IsZero() {
		set(HeaderCreatedAt, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return h
}

// Decode rebuilds the event a [Publisher] sent from a delivery (from
// Channel.Consume or Channel.Get). Payload aliases d.Body; ContentType is
// the content_type property. Headers holds every string header that is
// not ours (nor CC or BCC), or is nil when there is none; headers of other
// types, such as those RabbitMQ adds (x-death), are left out. Delay is not
// transmitted and decodes as zero.
//
// A message without a valid [HeaderEventID] or without [HeaderEventType],
// or with a malformed [HeaderAttempt] or [HeaderCreatedAt], returns an
// error wrapping [ErrNotAnEvent]; its text never quotes header values.
func Decode(d amqp.Delivery) (outbox.Event, error) {
	attrs, err := attributes(d.Headers)
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
		ContentType:    d.ContentType,
		Payload:        d.Body,
		Headers:        userHeaders(d.Headers),
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

// attributes returns the attribute headers of h, keyed by their names as
// spelled by the Header constants, whatever case they arrived in. A
// value that is not a string is an error.
func attributes(h amqp.Table) (map[string]string, error) {
	attrs := make(map[string]string, maxOwnHeaders)
	for k, v := range h {
		if !hasPrefixFold(k, HeaderPrefix) {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: header %s is not a string", ErrNotAnEvent, k)
		}
		attrs[HeaderPrefix+strings.ToLower(k[len(HeaderPrefix):])] = s
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

// userHeaders returns the string headers that are not reserved.
func userHeaders(h amqp.Table) map[string]string {
	var out map[string]string
	for k, v := range h {
		s, ok := v.(string)
		if !ok || reserved(k) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = s
	}
	return out
}
