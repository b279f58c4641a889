package amqppub_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// newPublisher returns a Publisher on the test broker, closed at cleanup.
func newPublisher(tb testing.TB, cfg amqppub.Config) *amqppub.Publisher {
	tb.Helper()
	if cfg.URL == "" && cfg.DialFunc == nil {
		cfg.URL = amqpURL
	}
	p, err := amqppub.New(cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func TestErrors(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)

	t.Run("MissingExchange", func(t *testing.T) {
		t.Parallel()
		name := uniqueName(t, "later")
		p := newPublisher(t, amqppub.Config{Exchange: name})
		for _, err := range p.Publish(runContext(t), messages("d", 2)) {
			require.ErrorIs(t, err, amqppub.ErrMissingExchange)
			require.True(t, outbox.IsUnavailable(err), "%v", err)
			require.False(t, outbox.IsPermanent(err), "%v", err)
			require.ErrorContains(t, err, name)
			requireClean(t, err)
		}
		// A deploy declares it: the same publisher now publishes.
		require.NoError(t, a.ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, false, false, false, nil))
		t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
		q := a.queue(t, name, "#", nil)
		for _, err := range p.Publish(runContext(t), messages("d", 2)) {
			require.NoError(t, err)
		}
		require.Equal(t, 2, depth(t, a, q))
	})

	t.Run("ExchangeDeletedAfterUse", func(t *testing.T) {
		t.Parallel()
		x := a.exchange(t)
		q := a.queue(t, x, "#", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x})
		require.NoError(t, p.Publish(runContext(t), messages("d", 1))[0])
		require.NoError(t, a.ch.ExchangeDelete(x, false, false))
		// Known to exist, so published: the broker closes the channel (404).
		for _, err := range p.Publish(runContext(t), messages("d", 3)) {
			require.ErrorIs(t, err, amqppub.ErrMissingExchange)
			require.True(t, outbox.IsUnavailable(err), "%v", err)
		}
		require.NoError(t, a.ch.ExchangeDeclare(x, amqp.ExchangeTopic, false, false, false, false, nil))
		require.NoError(t, a.ch.QueueBind(q, "#", x, false, nil))
		for _, err := range p.Publish(runContext(t), messages("d", 2)) {
			require.NoError(t, err)
		}
	})

	t.Run("Nacked", func(t *testing.T) {
		t.Parallel()
		x := a.exchange(t)
		a.queue(t, x, "#", amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
		p := newPublisher(t, amqppub.Config{Exchange: x})
		for _, err := range p.Publish(runContext(t), messages("d", 3)) {
			require.ErrorIs(t, err, amqppub.ErrNacked)
			require.False(t, outbox.IsPermanent(err), "a nack is retryable: %v", err)
			require.False(t, outbox.IsUnavailable(err), "a nack is no outage: %v", err)
			requireClean(t, err)
		}
	})

	t.Run("OverSizeRefusedBeforeSending", func(t *testing.T) {
		t.Parallel()
		x := a.exchange(t)
		q := a.queue(t, x, "#", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x, MaxMessageSize: 100})
		msgs := messages("d", 3)
		msgs[1].Event.Payload = []byte(strings.Repeat(secret, 10))
		errs := p.Publish(runContext(t), msgs)
		require.NoError(t, errs[0])
		require.NoError(t, errs[2])
		require.True(t, outbox.IsPermanent(errs[1]), "%v", errs[1])
		require.ErrorIs(t, errs[1], outbox.ErrInvalidEvent)
		require.ErrorIs(t, errs[1], amqppub.ErrMessageTooLarge)
		require.ErrorContains(t, errs[1], "200 bytes, more than the maximum message size of 100 bytes")
		requireClean(t, errs[1])
		require.Equal(t, 2, depth(t, a, q))
	})

	t.Run("OverSizeRefusedByBroker", func(t *testing.T) {
		if testing.Short() {
			t.Skip("sends 128 MiB")
		}
		t.Parallel()
		x := a.exchange(t)
		a.queue(t, x, "#", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x, MaxMessageSize: amqppub.MaxMessageSizeLimit})
		msgs := messages("d", 1)
		msgs[0].Event.Payload = make([]byte, 128<<20+1) // RabbitMQ 3.8-3.13 take up to 128 MiB, 4.x 16 MiB
		err := p.Publish(runContext(t), msgs)[0]
		require.ErrorIs(t, err, amqppub.ErrMessageTooLarge)
		require.True(t, outbox.IsPermanent(err), "%v", err)
		// The channel closed; the next call opens another.
		require.NoError(t, p.Publish(runContext(t), messages("d", 1))[0])
	})

	t.Run("RouteFuncError", func(t *testing.T) {
		t.Parallel()
		p := newPublisher(t, amqppub.Config{RouteFunc: func(amqppub.RouteParams) (amqppub.Route, error) {
			return amqppub.Route{}, errors.New("no route for this type")
		}})
		err := p.Publish(runContext(t), messages("d", 1))[0]
		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, "no route for this type")
	})

	t.Run("Unroutable", func(t *testing.T) {
		t.Parallel()
		x := a.exchange(t)
		q := a.queue(t, x, "bound", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x})
		msgs := append(messages("bound", 2), messages("nobody", 2)...)
		errs := p.Publish(runContext(t), msgs)
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		for _, err := range errs[2:] {
			require.ErrorIs(t, err, amqppub.ErrUnroutable)
			require.True(t, outbox.IsPermanent(err), "%v", err)
			require.ErrorContains(t, err, "unroutable")
			require.ErrorContains(t, err, `exchange "`+x+`"`)
			require.ErrorContains(t, err, `routing key "nobody"`)
			requireClean(t, err)
		}
		require.Equal(t, 2, depth(t, a, q))
	})

	// One event to two destinations in a call, the unroutable one first:
	// the broker returns that one before confirming it, and the return
	// must not fail the other, stored, message of the same event ID.
	t.Run("UnroutableBesideSameEvent", func(t *testing.T) {
		t.Parallel()
		x := a.exchange(t)
		q := a.queue(t, x, "bound", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x})
		e := newEvent(0)
		errs := p.Publish(runContext(t), []outbox.Message{{Destination: "nobody", Event: e}, {Destination: "bound", Event: e}})
		require.ErrorIs(t, errs[0], amqppub.ErrUnroutable)
		require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
		require.NoError(t, errs[1])
		require.Equal(t, 1, depth(t, a, q))
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		field string
		cfg   amqppub.Config
	}{
		{"MaxInFlight", amqppub.Config{MaxInFlight: -1}},
		{"IdleChannels", amqppub.Config{IdleChannels: 2000}},
		{"ConfirmTimeout", amqppub.Config{ConfirmTimeout: 1}},
		{"MaxMessageSize", amqppub.Config{MaxMessageSize: amqppub.MaxMessageSizeLimit + 1}},
		{"Exchange", amqppub.Config{Exchange: strings.Repeat("x", 256)}},
		{"RoutingKeyPrefix", amqppub.Config{RoutingKeyPrefix: strings.Repeat("x", 256)}},
		{"Source", amqppub.Config{Source: " padded "}},
		{"URL", amqppub.Config{URL: "http://user:hunter22@host/"}},
	} {
		_, err := amqppub.New(c.cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, c.field)
		require.Equal(t, c.field, ce.Field)
		require.NotContains(t, err.Error(), "hunter22")
	}
}

// TestDialErrorRedacted: a broker that cannot be reached is an outage,
// and the error names the URL without its password.
func TestDialErrorRedacted(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	p := newPublisher(t, amqppub.Config{URL: "amqp://user:hunter22@" + addr + "/"})
	for _, err := range p.Publish(context.Background(), messages("d", 2)) {
		require.ErrorIs(t, err, amqppub.ErrConnection)
		require.True(t, outbox.IsUnavailable(err), "%v", err)
		require.NotContains(t, err.Error(), "hunter22")
		require.ErrorContains(t, err, addr)
	}
}

func TestDecodeNotAnEvent(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]amqp.Table{
		"NoHeaders": nil,
		"BadID":     {"cloudEvents_id": "not-a-uuid", "cloudEvents_type": "t"},
		"NoType":    {"cloudEvents_id": "0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071"},
		"BadTime":   {"cloudEvents_id": "0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071", "cloudEvents_type": "t", "cloudEvents_time": "yesterday"},
		"Attempt":   {"cloudEvents_id": "0190a0b0-c0d0-7e0f-8a1b-2c3d4e5f6071", "cloudEvents_type": "t", "cloudEvents_attempt": "0"},
		"NotString": {"cloudEvents_id": int32(7), "cloudEvents_type": "t"},
	} {
		_, err := amqppub.Decode(amqp.Delivery{Headers: h})
		require.ErrorIs(t, err, amqppub.ErrNotAnEvent, name)
	}
}

// TestPublisherPrintsNoPassword: a Publisher printed in any form (a log
// line that includes it) shows its URL without the password.
func TestPublisherPrintsNoPassword(t *testing.T) {
	t.Parallel()
	p, err := amqppub.New(amqppub.Config{URL: "amqp://user:hunter22@rabbit.internal:5672/shop"})
	require.NoError(t, err)
	for _, verb := range []string{"%v", "%+v", "%s", "%#v"} {
		text := fmt.Sprintf(verb, p)
		require.NotContains(t, text, "hunter22", verb)
		require.Contains(t, text, "rabbit.internal:5672", verb)
	}
}
