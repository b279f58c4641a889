package natspub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// wire sends messages through the tests' NATS server on a subject of its
// own and returns them as a subscriber receives them: the client's header
// encoding, the server, and the client's header decoding.
type wire struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	subject string
}

func newWire(tb testing.TB) *wire {
	tb.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	w := &wire{nc: nc, subject: "natspubfuzz." + strings.ReplaceAll(uuid.NewString(), "-", "")}
	w.sub, err = nc.SubscribeSync(w.subject)
	require.NoError(tb, err)
	require.NoError(tb, nc.Flush())
	return w
}

// roundTrip publishes msg on the wire's subject and returns what arrives.
func (w *wire) roundTrip(t *testing.T, msg *nats.Msg) *nats.Msg {
	t.Helper()
	sent := *msg
	sent.Subject = w.subject
	require.NoError(t, w.nc.PublishMsg(&sent))
	got, err := w.sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	return got
}

// FuzzHeaders checks how an event becomes NATS message headers and back,
// through a real server. The publisher refuses exactly the events that
// break the header rule Emit enforces, with an *outbox.ValidationError
// naming the field HeaderProblem names and quoting no value; every event
// it takes (with a type, as Emit requires) decodes from what a subscriber
// receives byte for byte. Attempt is carried when positive (attempts are
// never negative).
func FuzzHeaders(f *testing.F) {
	outboxtest.AddEventSeeds(f)
	w := newWire(f)
	f.Fuzz(func(t *testing.T, id []byte, typ, aggType, aggID, pkey, idem, ct string, payload []byte,
		k1, v1, k2, v2 string, attempt int, createdAt int64,
	) {
		e := outboxtest.FuzzEvent(id, typ, aggType, aggID, pkey, idem, ct, payload, k1, v1, k2, v2, attempt, createdAt)
		msg, err := natspub.BuildMsg(0, w.subject, e.ID.String(), outbox.DefaultSource, e, 0)
		if e.ID == uuid.Nil {
			require.Error(t, err) // the stream deduplicates on the ID
			return
		}
		if field, _ := outbox.HeaderProblem(e); field != "" {
			requireRefused(t, e, field, err)
			return
		}
		require.NoError(t, err, "refused an event Emit accepts")
		if e.Type == "" {
			return // Emit requires a type
		}
		got, err := natspub.Decode(w.roundTrip(t, msg))
		require.NoError(t, err)
		want := e
		want.Attempt = max(e.Attempt, 0)
		require.Empty(t, outboxtest.EventDiff(want, got))
	})
}

// requireRefused checks the refusal of an event that breaks the header
// rule at field.
func requireRefused(t *testing.T, e outbox.Event, field string, err error) {
	t.Helper()
	var verr *outbox.ValidationError
	require.True(t, errors.As(err, &verr), "%T %v", err, err)
	require.Equal(t, field, verr.Field)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.Empty(t, outboxtest.QuotedValue(err.Error(), e))
}

// FuzzDecode feeds Decode any header block a NATS client can parse (as
// nats.DecodeHeadersMsg, which the client runs on every message it
// receives, does): it never panics; it either returns an event with an ID
// and a type, which the publisher refuses with an *outbox.ValidationError
// or which comes back unchanged through the server, or an error wrapping
// ErrNotAnEvent that quotes no header value.
func FuzzDecode(f *testing.F) {
	const id = "0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071"
	for _, block := range []string{
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: t\r\n\r\n",
		"NATS/1.0\r\nCE-ID: " + id + "\r\nCe-Type: order%20created\r\nx-a: b\r\nX-A: c\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: \"a\\\"b\"\r\nce-subject: %e2%9c%93\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: %ff\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: t\r\nce-attempt: -1\r\nce-time: 10000-01-01T00:00:00Z\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: t%\r\n\r\n",
		"NATS/1.0\r\nce-id: SECRET-VALUE-123\r\nce-type: t\r\n\r\n",
		"NATS/1.0 503\r\n\r\n",
		"NATS/1.0 408 Request Timeout\r\nce-id: " + id + "\r\nce-type: t\r\nStatus: 1\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: t\r\nx-empty:\r\nx-sp:  \t v \r\nNats-Msg-Id: 1\r\n\r\n",
		"NATS/1.0\r\nce-id: " + id + "\r\nce-type: t\r\nx: \x00\xfe\r\n: v\r\n\r\n",
	} {
		f.Add([]byte(block), []byte("p"))
	}
	w := newWire(f)
	f.Fuzz(func(t *testing.T, block, data []byte) {
		h, err := nats.DecodeHeadersMsg(block)
		if err != nil {
			return // the client drops such a message before anyone decodes it
		}
		e, err := natspub.Decode(&nats.Msg{Header: h, Data: data})
		if err != nil {
			require.ErrorIs(t, err, natspub.ErrNotAnEvent)
			for _, vs := range h {
				for _, v := range vs {
					if len(v) >= 8 && !strings.Contains(string(block), v+":") {
						require.NotContains(t, err.Error(), v)
					}
				}
			}
			return
		}
		require.NotEqual(t, uuid.Nil, e.ID)
		require.NotEmpty(t, e.Type)
		msg, err := natspub.BuildMsg(0, w.subject, e.ID.String(), outbox.DefaultSource, e, 0)
		if err != nil {
			var verr *outbox.ValidationError
			require.True(t, errors.As(err, &verr), "%T %v", err, err)
			return
		}
		again, err := natspub.Decode(w.roundTrip(t, msg))
		require.NoError(t, err)
		require.Empty(t, outboxtest.EventDiff(e, again))
	})
}
