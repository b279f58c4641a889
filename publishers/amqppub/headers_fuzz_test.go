package amqppub_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// wire sends messages through the test broker to a queue of its own
// (through the default exchange) and returns them as a consumer receives
// them: the client's encoding, the broker, and the client's decoding.
type wire struct {
	ch    *amqp.Channel
	queue string
}

func newWire(tb testing.TB) *wire {
	tb.Helper()
	a := newAdmin(tb)
	return &wire{ch: a.ch, queue: a.queue(tb, "", "", nil)}
}

// roundTrip publishes pub to the wire's queue and returns what arrives.
func (w *wire) roundTrip(t *testing.T, pub amqp.Publishing) amqp.Delivery {
	t.Helper()
	require.NoError(t, w.ch.PublishWithContext(runContext(t), "", w.queue, false, false, pub))
	ctx := runContext(t)
	for ctx.Err() == nil {
		d, ok, err := w.ch.Get(w.queue, true)
		require.NoError(t, err)
		if ok {
			return d
		}
		time.Sleep(time.Millisecond) // Get does not wait
	}
	t.Fatal("the message never arrived")
	return amqp.Delivery{}
}

// FuzzHeaders checks how an event becomes an AMQP message and back,
// through the real broker. The publisher refuses exactly the events that
// break the header rule Emit enforces, or that AMQP cannot carry (a
// reserved name, a short string over 255 bytes), with an
// *outbox.ValidationError naming the field and quoting no value; every
// event it takes (with a type, as Emit requires) decodes from what a
// consumer receives byte for byte.
func FuzzHeaders(f *testing.F) {
	outboxtest.AddEventSeeds(f)
	w := newWire(f)
	cfg := amqppub.Config{Source: outbox.DefaultSource, MaxMessageSize: amqppub.DefaultMaxMessageSize}
	route := amqppub.Route{RoutingKey: w.queue}
	f.Fuzz(func(t *testing.T, id []byte, typ, aggType, aggID, pkey, idem, ct string, payload []byte,
		k1, v1, k2, v2 string, attempt int, createdAt int64,
	) {
		e := outboxtest.FuzzEvent(id, typ, aggType, aggID, pkey, idem, ct, payload, k1, v1, k2, v2, attempt, createdAt)
		pub, err := amqppub.BuildPublishing(0, route, e, cfg)
		if e.ID == uuid.Nil {
			require.Error(t, err) // it is the message_id
			return
		}
		field, _ := outbox.HeaderProblem(e)
		if field == "" {
			field, _ = amqppub.AMQPProblem(e)
		}
		if field != "" {
			requireRefused(t, e, field, err)
			return
		}
		require.NoError(t, err, "refused an event Emit accepts")
		if e.Type == "" {
			return // Emit requires a type
		}
		got, err := amqppub.Decode(w.roundTrip(t, pub))
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

// FuzzDecode feeds Decode header tables of strings (attribute names in
// any case, values of any bytes) and a content type: it never panics; it
// either returns an event with an ID and a type, which the publisher
// refuses with an *outbox.ValidationError or which comes back unchanged
// through the broker, or an error wrapping ErrNotAnEvent that quotes no
// header value.
func FuzzDecode(f *testing.F) {
	const id = "0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071"
	f.Add("cloudEvents_id", id, "cloudEvents_type", "t", "x-a", "b", "")
	f.Add("CLOUDEVENTS_ID", id, "cloudevents_Type", "order created", "cloudEvents_attempt", "-1", "text/plain")
	f.Add("cloudEvents_id", id, "cloudEvents_type", "t", "cloudEvents_time", "10000-01-01T00:00:00Z", "")
	f.Add("cloudEvents_id", "SECRET-VALUE-123", "cloudEvents_type", "t", "CC", "x", "")
	f.Add("cloudEvents_id", id, "cloudEvents_type", "\xff", "x", "\x00\r\n", "a\x00b")
	w := newWire(f)
	cfg := amqppub.Config{Source: outbox.DefaultSource, MaxMessageSize: amqppub.DefaultMaxMessageSize}
	route := amqppub.Route{RoutingKey: w.queue}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, ct string) {
		h := amqp.Table{k1: v1, k2: v2, k3: v3}
		e, err := amqppub.Decode(amqp.Delivery{Headers: h, ContentType: ct, Body: []byte("p")})
		if err != nil {
			require.ErrorIs(t, err, amqppub.ErrNotAnEvent)
			for _, v := range []string{v1, v2, v3} {
				if len(v) >= 8 && v != k1 && v != k2 && v != k3 {
					require.NotContains(t, err.Error(), v)
				}
			}
			return
		}
		require.NotEqual(t, uuid.Nil, e.ID)
		require.NotEmpty(t, e.Type)
		pub, err := amqppub.BuildPublishing(0, route, e, cfg)
		if err != nil {
			var verr *outbox.ValidationError
			require.True(t, errors.As(err, &verr), "%T %v", err, err)
			return
		}
		again, err := amqppub.Decode(w.roundTrip(t, pub))
		require.NoError(t, err)
		require.Empty(t, outboxtest.EventDiff(e, again))
	})
}
