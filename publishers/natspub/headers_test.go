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

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stored := fetchAll(ctx, t, js, ts, ts.Prefix+"ok.rt", 1, quiet)
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

	names := []string{"Nats-Msg-Id", "nats-rollup", "Pgoutbox-Event-Type", "PGOUTBOX-anything"}
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
