package emitter

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

// Limits of the emitter FuzzValidateEvent checks against: small, so that
// the fuzzer reaches them with short inputs.
const (
	fuzzMaxPayload     = 64
	fuzzMaxHeaders     = 2
	fuzzMaxHeaderBytes = 48
)

// FuzzValidateEvent checks what Emit does with an event before it writes
// anything: it either refuses the event with an *outbox.ValidationError
// naming an Event field (whose text quotes no payload byte and no header
// value), or the event meets every rule the rest of pgoutbox relies on: text
// PostgreSQL can store, within the limits, the header rule publishers need
// to carry the event byte for byte (outbox.HeaderProblem), JSON where JSON
// is declared, and headers that come back from their JSON column exactly;
// and Emit writes it into a real outbox table (in a transaction rolled
// back) from which it reads back field for field, byte for byte.
// The seeds run in go test; make fuzz runs it longer.
func FuzzValidateEvent(f *testing.F) {
	long := strings.Repeat("k", maxKeyLen)
	for _, s := range []struct {
		typ, aggType, aggID, pkey, idem, ct string
		payload                             []byte
		k1, v1, k2, v2                      string
		delay                               int64
	}{
		{typ: "order.created", ct: "application/json", payload: []byte(`{"id":1}`), k1: "x-tenant", v1: "t1"},
		{typ: "", payload: []byte("p")},
		{typ: " t", payload: []byte("p")},
		{typ: "t\u00a0", payload: []byte("p")},
		{typ: "\t\n", payload: []byte("p")},
		{typ: "a\x00b", payload: []byte("p")},
		{typ: "a\xffb", payload: []byte("p")},
		{typ: "t", aggID: "\xc3", payload: []byte("p")},
		{typ: "t", pkey: "k\r\n", payload: []byte("p")},
		{typ: "t", idem: " lead", payload: []byte("p")},
		{typ: "t", aggType: strings.Repeat("a", maxTypeLen+1), payload: []byte("p")},
		{typ: "t", aggID: long, pkey: long, idem: long, payload: []byte("p")},
		{typ: "t", aggID: long + "x", payload: []byte("p")},
		{typ: "t", payload: nil},
		{typ: "t", payload: []byte(strings.Repeat("p", fuzzMaxPayload+1))},
		{typ: "t", ct: "Application/JSON; charset=utf-8", payload: []byte(`{"a":`)},
		{typ: "t", ct: "application/cloudevents+json", payload: []byte(`"\u0000"`)},
		{typ: "t", ct: "application/json", payload: []byte(`"\\u0000"`)},
		{typ: "t", payload: []byte("p"), k1: "ce_id", v1: "x"},
		{typ: "t", payload: []byte("p"), k1: "CE-Type", v1: "x"},
		{typ: "t", payload: []byte("p"), k1: "content-TYPE", v1: "x"},
		{typ: "t", payload: []byte("p"), k1: "nats-msg-id", v1: "x"},
		{typ: "t", payload: []byte("p"), k1: "STATUS", v1: "503"},
		{typ: "t", payload: []byte("p"), k1: "a b", v1: "x"},
		{typ: "t", payload: []byte("p"), k1: "k", v1: "v\x00"},
		{typ: "t", payload: []byte("p"), k1: "k", v1: "\xfe"},
		{typ: "t", payload: []byte("p"), k1: "k", v1: "v\t"},
		{typ: "t", payload: []byte("p"), k1: "x-secret", v1: "SECRET-VALUE\x00", k2: "x-pad", v2: "  SECRET-PADDED  "},
		{typ: "t", ct: "application/json", payload: []byte(`{"secret":"SECRET-PAYLOAD"`), k1: "x-secret", v1: "SECRET-VALUE"},
		{typ: "t", payload: []byte("p"), k1: "k", v1: "", k2: "K", v2: `"\<é>`},
		{typ: "t", payload: []byte("p"), k1: "k", v1: strings.Repeat("v", fuzzMaxHeaderBytes)},
		{typ: "t", payload: []byte("p"), delay: -1},
		{typ: "t", payload: []byte("p"), delay: int64(time.Hour)},
	} {
		f.Add(s.typ, s.aggType, s.aggID, s.pkey, s.idem, s.ct, s.payload, s.k1, s.v1, s.k2, s.v2, s.delay)
	}
	db := testdb.NewMigrated(f)
	e, err := New(Config{
		Table: db.Table(), DisableNotify: true,
		MaxPayloadBytes: fuzzMaxPayload, MaxHeaders: fuzzMaxHeaders, MaxHeaderBytes: fuzzMaxHeaderBytes,
	})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, typ, aggType, aggID, pkey, idem, ct string, payload []byte, k1, v1, k2, v2 string, delay int64) {
		ev := outbox.Event{
			Type: typ, AggregateType: aggType, AggregateID: aggID, PartitionKey: pkey, IdempotencyKey: idem,
			ContentType: ct, Payload: payload, Delay: time.Duration(delay),
		}
		ev.Headers = fuzzHeaders(k1, v1, k2, v2)
		_, err := e.prepare([]outbox.Event{ev})
		if err != nil {
			requireRejected(t, ev, err)
			return
		}
		requireCarriable(t, ev)
		requireStored(t, e, db, ev)
	})
}

// requireStored emits ev in a transaction that is rolled back and checks
// that the row reads back as ev, field for field and byte for byte.
func requireStored(t *testing.T, e *Emitter, db *testdb.DB, ev outbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	ids, err := e.Emit(ctx, tx, ev)
	require.NoError(t, err)
	got := pgoutboxtest.RequireEmitted(ctx, t, tx, db.Table(), pgoutboxtest.Want{ID: ids[0], Type: ev.Type})
	want := ev
	want.ID, want.Delay, want.CreatedAt = ids[0], 0, got.CreatedAt
	require.Empty(t, outboxtest.EventDiff(want, got))
}

// fuzzHeaders returns the headers a fuzz input stands for: each pair
// whose name or value is not empty, or nil when there is none.
func fuzzHeaders(k1, v1, k2, v2 string) map[string]string {
	var h map[string]string
	for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
		if kv[0] == "" && kv[1] == "" {
			continue
		}
		if h == nil {
			h = make(map[string]string, 2)
		}
		h[kv[0]] = kv[1]
	}
	return h
}

// eventFields are the Event fields a *ValidationError of Emit may name.
var eventFields = []string{"Type", "AggregateType", "AggregateID", "PartitionKey", "IdempotencyKey", "ContentType", "Payload", "Headers", "Delay", "ID"}

// requireRejected checks the error of a refused event: typed, naming a
// field, quoting no payload and no header value.
func requireRejected(t *testing.T, ev outbox.Event, err error) {
	t.Helper()
	var verr *outbox.ValidationError
	require.True(t, errors.As(err, &verr), "%T %v", err, err)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.Zero(t, verr.Index)
	require.Contains(t, eventFields, verr.Field)
	require.Empty(t, outboxtest.QuotedValue(err.Error(), ev), "an error text quotes a payload or header value")
}

// requireCarriable checks that an accepted event meets every rule the
// database and the publishers rely on, restated here from the
// documentation rather than by calling the validator's helpers.
func requireCarriable(t *testing.T, ev outbox.Event) {
	t.Helper()
	require.NotEmpty(t, ev.Type)
	first, _ := utf8.DecodeRuneInString(ev.Type)
	last, _ := utf8.DecodeLastRuneInString(ev.Type)
	require.False(t, unicode.IsSpace(first) || unicode.IsSpace(last), "Type %q has outer white space", ev.Type)
	for _, s := range []struct {
		value string
		max   int
	}{
		{ev.Type, maxTypeLen}, {ev.AggregateType, maxTypeLen}, {ev.ContentType, maxTypeLen},
		{ev.AggregateID, maxKeyLen}, {ev.PartitionKey, maxKeyLen}, {ev.IdempotencyKey, maxKeyLen},
	} {
		require.LessOrEqual(t, len(s.value), s.max)
		require.True(t, utf8.ValidString(s.value))
		require.NotContains(t, s.value, "\x00")
	}
	require.GreaterOrEqual(t, ev.Delay, time.Duration(0))
	require.NotEmpty(t, ev.Payload)
	require.LessOrEqual(t, len(ev.Payload), fuzzMaxPayload)
	if isJSON(ev.ContentType) {
		require.True(t, json.Valid(ev.Payload))
	}
	require.LessOrEqual(t, len(ev.Headers), fuzzMaxHeaders)
	field, reason := outbox.HeaderProblem(ev)
	require.Empty(t, field, "accepted an event that breaks the header rule: %s", reason)

	var back map[string]string
	require.NoError(t, json.Unmarshal([]byte(headersJSON(ev.Headers, nil)), &back))
	if len(ev.Headers) == 0 {
		require.Empty(t, back)
		return
	}
	require.Equal(t, ev.Headers, back, "the headers column does not decode to the headers")
}
