package natspub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

const secret = "SECRET-VALUE"

func TestDecode(t *testing.T) {
	t.Parallel()

	valid := func() nats.Header {
		return nats.Header{
			natspub.HeaderEventID:   []string{uuid.NewString()},
			natspub.HeaderEventType: []string{"order.created"},
		}
	}
	reject := func(t *testing.T, h nats.Header, what string) {
		t.Helper()
		_, err := natspub.Decode(&nats.Msg{Header: h, Data: []byte(secret)})
		require.ErrorIs(t, err, natspub.ErrNotAnEvent)
		require.Contains(t, err.Error(), what)
		require.NotContains(t, err.Error(), secret)
	}

	t.Run("BadHeader", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{natspub.HeaderAttempt, natspub.HeaderCreatedAt, natspub.HeaderEventID} {
			h := valid()
			h.Set(name, secret)
			reject(t, h, name)
		}
	})
	t.Run("Minimal", func(t *testing.T) {
		t.Parallel()
		h := valid()
		h.Set("Nats-Sequence", "12") // the server's headers are not the user's
		e, err := natspub.Decode(&nats.Msg{Header: h})
		require.NoError(t, err)
		require.Equal(t, "order.created", e.Type)
		require.Nil(t, e.Headers)
		require.Zero(t, e.Attempt)
		require.True(t, e.CreatedAt.IsZero())
	})
	t.Run("MissingType", func(t *testing.T) {
		t.Parallel()
		h := valid()
		delete(h, natspub.HeaderEventType)
		reject(t, h, natspub.HeaderEventType)
	})
	t.Run("NilMessage", func(t *testing.T) {
		t.Parallel()
		_, err := natspub.Decode(nil)
		require.ErrorIs(t, err, natspub.ErrNotAnEvent)
		_, err = natspub.DecodeJetStream(nil)
		require.ErrorIs(t, err, natspub.ErrNotAnEvent)
	})
	t.Run("NoHeaders", func(t *testing.T) {
		t.Parallel()
		reject(t, nil, natspub.HeaderEventID)
	})
	// The binding makes header names case-insensitive, and a receiver must
	// take lower-case hex and double-quoted values.
	t.Run("AnyCaseLowerHexAndQuotes", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		h := nats.Header{
			"CE-ID":               {id.String()},
			"Ce-Type":             {"order%20cr%c3%a9%C3%A9"},
			"ce-subject":          {`"a b \"c\""`},
			"ce-source":           {"/elsewhere"},
			"ce-somethingelse":    {"read past"},
			"x-user":              {"a b"},
			jetstream.MsgIDHeader: {id.String()},
		}
		e, err := natspub.Decode(&nats.Msg{Header: h})
		require.NoError(t, err)
		require.Equal(t, id, e.ID)
		require.Equal(t, "order créé", e.Type)
		require.Equal(t, `a b "c"`, e.AggregateID)
		require.Equal(t, map[string]string{"x-user": "a b"}, e.Headers)
	})
	t.Run("BadPercentEncoding", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []string{"%C0%A0", "a%", "a%4", "%G0", "%FF"} {
			h := valid()
			h.Set(natspub.HeaderAggregateID, bad)
			reject(t, h, natspub.HeaderAggregateID)
		}
	})
}

// TestWireFormat checks the message as a CloudEvents consumer sees it: the
// binary content mode of the CloudEvents NATS binding, every attribute in
// a ce- header, percent-encoded; the event's own headers as they are.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	js, ts, _ := setupPublisher(t)
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix, Source: "urn:acme:orders"})
	require.NoError(t, err)
	sub, err := js.Conn().SubscribeSync(ts.Prefix + "ok.>")
	require.NoError(t, err)
	require.NoError(t, js.Conn().Flush())
	e := outbox.Event{
		ID: uuid.Must(uuid.NewV7()), Type: "order created", AggregateType: "order", AggregateID: "7%",
		PartitionKey: "clé", IdempotencyKey: `"k"`, ContentType: "application/json", Attempt: 2,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Headers: map[string]string{"x-raw": "a b"},
		Payload: []byte(`{}`),
	}
	require.Equal(t, []error{nil}, p.Publish(context.Background(), []outbox.Message{{Destination: "ok.wire", Event: e}}))
	msg, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	want := nats.Header{
		"ce-specversion":      {"1.0"},
		"ce-id":               {e.ID.String()},
		"ce-source":           {"urn:acme:orders"},
		"ce-type":             {"order%20created"},
		"ce-time":             {"2026-01-02T03:04:05Z"},
		"ce-subject":          {"7%25"},
		"ce-datacontenttype":  {"application/json"},
		"ce-partitionkey":     {"cl%C3%A9"},
		"ce-aggregatetype":    {"order"},
		"ce-idempotencykey":   {"%22k%22"},
		"ce-attempt":          {"2"},
		"x-raw":               {"a b"},
		jetstream.MsgIDHeader: {e.ID.String()},
	}
	require.Equal(t, want, msg.Header)
	require.Equal(t, []byte(`{}`), msg.Data)
}

// TestHeadersRoundTrip publishes events and decodes them from a core
// subscription (Decode) and from the stream (DecodeJetStream).
func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()

	full := outboxtest.NewEvent(3)
	full.Attempt = 4
	full.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.FixedZone("x", 3600))
	sparse := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "order.created", AggregateID: "order-1"}

	for name, e := range map[string]outbox.Event{"Full": full, "Sparse": sparse} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			js, ts, p := setupPublisher(t)
			sub, err := js.Conn().SubscribeSync(ts.Prefix + "ok.>")
			require.NoError(t, err)
			require.NoError(t, js.Conn().Flush())
			errs := p.Publish(context.Background(), []outbox.Message{{Destination: "ok.rt", Event: e}})
			require.Equal(t, []error{nil}, errs)

			core, err := sub.NextMsg(5 * time.Second)
			require.NoError(t, err)
			fromCore, err := natspub.Decode(core)
			require.NoError(t, err)
			requireSameEvent(t, e, fromCore)
			require.Equal(t, e.ID.String(), core.Header.Get(jetstream.MsgIDHeader))

			stored := fetchAll(runContext(t), t, js, ts, ts.Prefix+"ok.rt", 1, quiet)
			require.Len(t, stored, 1)
			fromStream, err := natspub.DecodeJetStream(stored[0])
			require.NoError(t, err)
			requireSameEvent(t, e, fromStream)
		})
	}
}

// requireSameEvent compares every transmitted field; Delay is not sent
// and CreatedAt comes back in UTC.
func requireSameEvent(t *testing.T, want, got outbox.Event) {
	t.Helper()
	require.True(t, want.CreatedAt.Equal(got.CreatedAt), "CreatedAt %v, want %v", got.CreatedAt, want.CreatedAt)
	want.CreatedAt, got.CreatedAt = time.Time{}, time.Time{}
	if len(want.Payload) == 0 {
		want.Payload = got.Payload // nil and empty both travel as no data
	}
	require.Equal(t, want, got)
}

// setupPublisher returns a connection, a stream and a publisher of the
// test's own, with the stream's prefix as subject prefix.
func setupPublisher(t *testing.T) (jetstream.JetStream, testStream, *natspub.Publisher) {
	t.Helper()
	js := connect(t, natsURL)
	ts := newStream(t, js, jetstream.StreamConfig{})
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix})
	require.NoError(t, err)
	return js, ts, p
}

func TestReservedHeaders(t *testing.T) {
	t.Parallel()
	js, ts, p := setupPublisher(t)

	names := []string{"Nats-Msg-Id", "nats-rollup", "ce-type", "CE-anything", "ce_id", "Content-Type"}
	msgs := make([]outbox.Message, 0, len(names)+1)
	for i, name := range names {
		e := outboxtest.NewEvent(i)
		e.Headers[name] = secret
		msgs = append(msgs, outbox.Message{Destination: "ok.reserved", Event: e})
	}
	msgs = append(msgs, outbox.Message{Destination: "ok.reserved", Event: outboxtest.NewEvent(9)})

	errs := p.Publish(context.Background(), msgs)
	for i, name := range names {
		require.Error(t, errs[i], name)
		require.True(t, outbox.IsPermanent(errs[i]), name)
		require.Contains(t, errs[i].Error(), name)
		require.NotContains(t, errs[i].Error(), secret)
	}
	require.NoError(t, errs[len(names)], "a clean event of the same batch is published")
	require.Len(t, fetchAll(context.Background(), t, js, ts, ts.Prefix+"ok.reserved", 2, quiet), 1)
}

func TestPublishRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, _, p := setupPublisher(t)

	noID := outboxtest.NewEvent(0)
	noID.ID = uuid.Nil
	msgs := []outbox.Message{
		{Destination: "ok.a b", Event: outboxtest.NewEvent(1)},
		{Destination: "ok..x", Event: outboxtest.NewEvent(2)},
		{Destination: "ok.*", Event: outboxtest.NewEvent(3)},
		{Destination: "ok.>", Event: outboxtest.NewEvent(4)},
		{Destination: "ok.", Event: outboxtest.NewEvent(5)},
		{Destination: "ok.fine", Event: noID},
	}
	for i, err := range p.Publish(context.Background(), msgs) {
		require.Error(t, err, "message %d", i)
		require.True(t, outbox.IsPermanent(err), "message %d: %v", i, err)
		require.False(t, strings.Contains(err.Error(), "SECRET"), "message %d: %v", i, err)
	}
}
