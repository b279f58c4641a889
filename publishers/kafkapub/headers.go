package kafkapub

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Record header names: the CloudEvents attributes of the envelope (see
// package outbox, [outbox.AttrID] and after) in the binary content mode of
// the CloudEvents Kafka protocol binding, so that a CloudEvents consumer
// reads the record as a CloudEvent. Kafka header names are case-sensitive;
// they are written exactly as spelled here. A header is left out when its
// field is empty. The event's own headers follow under their own names.
const (
	// HeaderPrefix starts the name of every attribute header, as the
	// binding prescribes. An event header whose name starts with it, in
	// any case, is refused: the emitter rejects it at emit, and Publish
	// fails such a message with a permanent error naming the header.
	HeaderPrefix = "ce_"
	// HeaderEventID carries Event.ID in its canonical text form. Always
	// present; consumers deduplicate on it.
	HeaderEventID = HeaderPrefix + outbox.AttrID
	// HeaderSource carries Config.Source. Always present; not decoded.
	HeaderSource = HeaderPrefix + outbox.AttrSource
	// HeaderSpecVersion carries outbox.CloudEventsSpecVersion. Always
	// present.
	HeaderSpecVersion = HeaderPrefix + outbox.AttrSpecVersion
	// HeaderEventType carries Event.Type. Always present.
	HeaderEventType = HeaderPrefix + outbox.AttrType
	// HeaderCreatedAt carries Event.CreatedAt in UTC as RFC 3339 with
	// nanoseconds (time.RFC3339Nano).
	HeaderCreatedAt = HeaderPrefix + outbox.AttrTime
	// HeaderAggregateID carries Event.AggregateID, as the CloudEvents
	// subject.
	HeaderAggregateID = HeaderPrefix + outbox.AttrSubject
	// HeaderContentType carries Event.ContentType: the binding maps the
	// datacontenttype attribute to the plain "content-type" header. An
	// event header of that name, in any case, is refused like a prefixed
	// one.
	HeaderContentType = "content-type"
	// HeaderPartitionKey carries Event.PartitionKey, which may differ from
	// the record key (see Config.KeyFunc).
	HeaderPartitionKey = HeaderPrefix + outbox.AttrPartitionKey
	// HeaderAggregateType carries Event.AggregateType.
	HeaderAggregateType = HeaderPrefix + outbox.AttrAggregateType
	// HeaderIdempotencyKey carries Event.IdempotencyKey.
	HeaderIdempotencyKey = HeaderPrefix + outbox.AttrIdempotencyKey
	// HeaderAttempt carries Event.Attempt in decimal, when positive.
	HeaderAttempt = HeaderPrefix + outbox.AttrAttempt
)

// ownHeaders is how many headers of ours a record can carry.
const ownHeaders = 11

// ErrNotAnEvent is the root of the errors [Decode] returns for a record
// that does not carry an outbox event.
var ErrNotAnEvent = errors.New("kafkapub: record is not an outbox event")

// errNotPositive marks an attempt header below 1 as malformed.
var errNotPositive = errors.New("not a positive integer")

// encodeHeaders returns the record headers for e: a field of the event
// only when it is not empty, an event header always, an empty value
// included. All values share one buffer, sized up front, so a record costs
// two allocations however many headers it has.
func encodeHeaders(e outbox.Event, source string) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, ownHeaders+len(e.Headers))
	buf := make([]byte, 0, headerBytes(e, source))
	add := func(k string, v []byte) { // v was appended to buf
		hs = append(hs, kgo.RecordHeader{Key: k, Value: v[:len(v):len(v)]})
		buf = v[len(v):]
	}
	field := func(k string, v []byte) {
		if len(v) > 0 {
			add(k, v)
		}
	}
	field(HeaderEventID, appendUUID(buf, e.ID))
	field(HeaderSource, append(buf, source...))
	field(HeaderSpecVersion, append(buf, outbox.CloudEventsSpecVersion...))
	field(HeaderEventType, append(buf, e.Type...))
	field(HeaderAggregateType, append(buf, e.AggregateType...))
	field(HeaderAggregateID, append(buf, e.AggregateID...))
	field(HeaderPartitionKey, append(buf, e.PartitionKey...))
	field(HeaderIdempotencyKey, append(buf, e.IdempotencyKey...))
	field(HeaderContentType, append(buf, e.ContentType...))
	if e.Attempt > 0 {
		field(HeaderAttempt, strconv.AppendInt(buf, int64(e.Attempt), 10))
	}
	if !e.CreatedAt.IsZero() {
		field(HeaderCreatedAt, e.CreatedAt.UTC().AppendFormat(buf, time.RFC3339Nano))
	}
	for k, v := range e.Headers {
		add(k, append(buf, v...))
	}
	return hs
}

// checkHeaderNames refuses, permanently, a header of event i of a call whose name starts
// with HeaderPrefix or is HeaderContentType, in any case: Decode, or a
// CloudEvents consumer, would take it for an attribute of the event. The
// error wraps an *outbox.ValidationError (errors.Is outbox.ErrInvalidEvent)
// and names the header, never its value. Kafka carries every other name
// and value byte for byte, so nothing else of the header rule is checked.
func checkHeaderNames(i int, e outbox.Event) error {
	for k := range e.Headers {
		if ours(k) {
			return outbox.Permanent(&originError{context: "kafkapub", err: &outbox.ValidationError{
				Index: i, Field: "Headers", Reason: fmt.Sprintf("name %q is reserved for CloudEvents attributes (%s*, %s)", k, HeaderPrefix, HeaderContentType)}})
		}
	}
	return nil
}

// ours reports whether a header name, in any case, is one of the
// attribute headers.
func ours(name string) bool {
	return len(name) >= len(HeaderPrefix) && strings.EqualFold(name[:len(HeaderPrefix)], HeaderPrefix) ||
		strings.EqualFold(name, HeaderContentType)
}

// headerBytes is the room encodeHeaders needs for the values of e.
func headerBytes(e outbox.Event, source string) int {
	n := 36 + 20 + len(time.RFC3339Nano) + len(source) + len(outbox.CloudEventsSpecVersion) + len(e.Type) + len(e.AggregateType) + len(e.AggregateID) +
		len(e.PartitionKey) + len(e.IdempotencyKey) + len(e.ContentType)
	for _, v := range e.Headers {
		n += len(v)
	}
	return n
}

// appendUUID appends the canonical 36-character form of id.
func appendUUID(buf []byte, id uuid.UUID) []byte {
	var text [36]byte
	hex.Encode(text[0:8], id[0:4])
	hex.Encode(text[9:13], id[4:6])
	hex.Encode(text[14:18], id[6:8])
	hex.Encode(text[19:23], id[8:10])
	hex.Encode(text[24:36], id[10:16])
	text[8], text[13], text[18], text[23] = '-', '-', '-', '-'
	return append(buf, text[:]...)
}

// Decode rebuilds the event a [Publisher] wrote into r: ID, type,
// aggregate, keys, content type, attempt, creation time and headers from
// the record headers, and the payload from r.Value, which the event shares
// rather than copies. Delay is not carried and stays zero; the source and
// specversion attributes, and any other ce_ attribute, are read past.
//
// A record without a valid event ID or without an event type, or with a
// malformed attempt (not a positive decimal integer) or creation time,
// returns an error wrapping [ErrNotAnEvent]; its text names the header,
// never its value.
func Decode(r *kgo.Record) (outbox.Event, error) {
	e := outbox.Event{Payload: r.Value}
	for _, h := range r.Headers {
		if err := decodeHeader(&e, h); err != nil {
			return outbox.Event{}, err
		}
	}
	switch {
	case e.ID == uuid.Nil:
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing", ErrNotAnEvent, HeaderEventID)
	case e.Type == "":
		return outbox.Event{}, fmt.Errorf("%w: header %s is missing", ErrNotAnEvent, HeaderEventType)
	}
	return e, nil
}

// decodeHeader sets the field of e that h carries.
func decodeHeader(e *outbox.Event, h kgo.RecordHeader) error {
	v := string(h.Value)
	var err error
	switch h.Key {
	case HeaderEventID:
		e.ID, err = uuid.Parse(v)
	case HeaderEventType:
		e.Type = v
	case HeaderAggregateType:
		e.AggregateType = v
	case HeaderAggregateID:
		e.AggregateID = v
	case HeaderPartitionKey:
		e.PartitionKey = v
	case HeaderIdempotencyKey:
		e.IdempotencyKey = v
	case HeaderContentType:
		e.ContentType = v
	case HeaderAttempt:
		e.Attempt, err = strconv.Atoi(v)
		if err == nil && e.Attempt < 1 {
			err = errNotPositive // attempts count from 1; a positive one is always sent
		}
	case HeaderCreatedAt:
		e.CreatedAt, err = time.Parse(time.RFC3339Nano, v)
	case HeaderSource, HeaderSpecVersion:
	default:
		if ours(h.Key) {
			return nil // an attribute of a later version, or another producer's
		}
		if e.Headers == nil {
			e.Headers = make(map[string]string)
		}
		e.Headers[h.Key] = v
	}
	if err != nil {
		// err quotes the value; name the header only.
		return fmt.Errorf("%w: header %s is malformed", ErrNotAnEvent, h.Key)
	}
	return nil
}
