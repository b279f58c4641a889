package amqppub_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// quiet is how long a read waits for one more message before deciding
// that nothing more is stored.
const quiet = 500 * time.Millisecond

// TestConformance runs the outbox publisher suite. Each destination is an
// exchange of its own (Config.RouteFunc routes a destination to the
// exchange of that name), bound to a queue the harness reads; a missing
// destination names an exchange that does not exist. Features:
//   - ServerDedupe is false: RabbitMQ does not deduplicate on message_id.
//   - KeyOrder: one Publish call publishes on one channel, in batch
//     order, and RabbitMQ routes and enqueues a channel's messages in the
//     order they were published, so a queue holds them in batch order.
//   - CloudEvents: the harness reads the attributes as the AMQP binding
//     defines them, independently of Decode: cloudEvents_* headers, and
//     datacontenttype from the content_type property.
func TestConformance(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	var mu sync.Mutex
	queues := map[string]string{} // destination -> queue
	h := outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := amqppub.New(amqppub.Config{URL: amqpURL, RouteFunc: func(rp amqppub.RouteParams) (amqppub.Route, error) {
				return amqppub.Route{Exchange: rp.Destination, RoutingKey: "k"}, nil
			}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		NewDestination: func(t *testing.T) string {
			x := a.exchange(t)
			q := a.queue(t, x, "#", nil)
			mu.Lock()
			queues[x] = q
			mu.Unlock()
			return x
		},
		MissingDestination: func(t *testing.T) string { return uniqueName(t, "missing") },
		Receive: func(ctx context.Context, t *testing.T, dest string, n int) []outboxtest.Received {
			mu.Lock()
			q := queues[dest]
			mu.Unlock()
			return receive(ctx, t, a, dest, q, n)
		},
		Quiet: quiet,
	}
	outboxtest.RunPublisherSuite(t, h, outboxtest.Features{KeyOrder: true, CloudEvents: true})
}

// receive reads queue, bound to the exchange dest, and decodes every
// message.
func receive(ctx context.Context, t *testing.T, a *admin, dest, queue string, n int) []outboxtest.Received {
	t.Helper()
	ds := a.read(ctx, t, queue, n, quiet)
	out := make([]outboxtest.Received, len(ds))
	for i, d := range ds {
		e, err := amqppub.Decode(d)
		require.NoError(t, err)
		out[i] = outboxtest.Received{Destination: d.Exchange, Event: e, Attributes: attributes(d)}
	}
	return out
}

// attributes reads the CloudEvents attributes of d as the AMQP binding
// defines them: cloudEvents_ headers, and the content_type property for
// datacontenttype.
func attributes(d amqp.Delivery) map[string]string {
	attrs := map[string]string{}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok && strings.HasPrefix(k, "cloudEvents_") {
			attrs[strings.TrimPrefix(k, "cloudEvents_")] = s
		}
	}
	if d.ContentType != "" {
		attrs[outbox.AttrDataContentType] = d.ContentType
	}
	return attrs
}
