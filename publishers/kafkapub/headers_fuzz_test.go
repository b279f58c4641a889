package kafkapub

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

// FuzzHeaders checks how an event becomes Kafka record headers and back.
// An event Emit accepts (non-empty type, the header rule) is never refused;
// a refused one gets a permanent *outbox.ValidationError naming Headers
// and quoting no value; every other event with an ID and a type decodes
// from its record byte for byte. Kafka headers are length-prefixed bytes,
// so the record a Publisher hands to franz-go is what a consumer reads.
// Attempt is carried when positive (attempts are never negative).
func FuzzHeaders(f *testing.F) {
	outboxtest.AddEventSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, typ, aggType, aggID, pkey, idem, ct string, payload []byte,
		k1, v1, k2, v2 string, attempt int, createdAt int64,
	) {
		e := outboxtest.FuzzEvent(id, typ, aggType, aggID, pkey, idem, ct, payload, k1, v1, k2, v2, attempt, createdAt)
		err := checkHeaderNames(0, e)
		if field, _ := outbox.HeaderProblem(e); field == "" {
			require.NoError(t, err, "refused an event Emit accepts")
		}
		if err != nil {
			requireRefused(t, e, err)
			return
		}
		if e.ID == uuid.Nil || e.Type == "" {
			return // Emit gives every event an ID and a type
		}
		r := &kgo.Record{Value: e.Payload, Headers: encodeHeaders(e, outbox.DefaultSource)}
		got, err := Decode(r)
		require.NoError(t, err)
		want := e
		want.Attempt = max(e.Attempt, 0)
		require.Empty(t, outboxtest.EventDiff(want, got))
	})
}

// requireRefused checks a refusal of checkHeaderNames.
func requireRefused(t *testing.T, e outbox.Event, err error) {
	t.Helper()
	var verr *outbox.ValidationError
	require.True(t, errors.As(err, &verr), "%T %v", err, err)
	require.Equal(t, "Headers", verr.Field)
	require.True(t, outbox.IsPermanent(err))
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.Empty(t, outboxtest.QuotedValue(err.Error(), e))
}

// FuzzDecode feeds Decode records with any headers: it never panics; it
// either returns an event with an ID and a type, which encodes back into
// headers that decode to the same event, or an error wrapping
// ErrNotAnEvent that quotes no header value.
func FuzzDecode(f *testing.F) {
	id := []byte("0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071")
	f.Add(HeaderEventID, id, HeaderEventType, []byte("t"), "x", []byte("y"))
	f.Add(HeaderEventID, id, HeaderEventType, []byte("t"), HeaderAttempt, []byte("-3"))
	f.Add(HeaderEventID, id, HeaderEventType, []byte("t"), HeaderAttempt, []byte("+07"))
	f.Add(HeaderEventID, id, HeaderEventType, []byte("t"), HeaderCreatedAt, []byte("2026-03-04T05:06:07.8+01:00"))
	f.Add(HeaderEventID, id, HeaderEventType, []byte("t"), HeaderCreatedAt, []byte("10000-01-01T00:00:00Z"))
	f.Add(HeaderEventID, []byte("{0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071}"), HeaderEventType, []byte("\xff"), "CE_TYPE", []byte("u"))
	f.Add(HeaderEventID, []byte("urn:uuid:0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071"), HeaderEventType, []byte("t"), "", []byte(nil))
	f.Add(HeaderEventID, []byte("SECRET-VALUE-123"), HeaderEventType, []byte("t"), "ce_dataschema", []byte("/s"))
	f.Add(HeaderEventType, []byte("t"), "content-type", []byte("a"), HeaderContentType, []byte("b"))
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, k3 string, v3 []byte) {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: k1, Value: v1}, {Key: k2, Value: v2}, {Key: k3, Value: v3}}}
		e, err := Decode(r)
		if err != nil {
			require.ErrorIs(t, err, ErrNotAnEvent)
			for _, v := range [][]byte{v1, v2, v3} {
				if len(v) >= 8 && !strings.Contains(k1+k2+k3, string(v)) {
					require.NotContains(t, err.Error(), string(v))
				}
			}
			return
		}
		require.NotEqual(t, uuid.Nil, e.ID)
		require.NotEmpty(t, e.Type)
		require.NoError(t, checkHeaderNames(0, e), "Decode returned a header of ours")
		again, err := Decode(&kgo.Record{Headers: encodeHeaders(e, outbox.DefaultSource)})
		require.NoError(t, err)
		require.Empty(t, outboxtest.EventDiff(e, again))
	})
}
