package natspub_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// quiet is how long a read waits for one more message before deciding
// that nothing more is stored.
const quiet = 500 * time.Millisecond

// TestConformance runs the outbox publisher suite. Features:
//   - ServerDedupe: the stream drops a second message with the same
//     Nats-Msg-Id within its duplicate window, and the publisher counts the
//     duplicate PubAck as success.
//   - KeyOrder: one Publish call writes the batch in order on one
//     connection, the server hands a connection's messages to the stream's
//     inbound queue in order, and the publisher turns off the client's
//     "no responders" re-send, the one path that could store a message
//     after a later one. So the messages a call stores are stored, and
//     read back, in batch order.
func TestConformance(t *testing.T) {
	t.Parallel()
	js := connect(t, natsURL)
	ts := newStream(t, js, jetstream.StreamConfig{})
	var seq atomic.Int64
	h := outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix})
			require.NoError(t, err)
			return p
		},
		NewDestination: func(*testing.T) string { return fmt.Sprintf("ok.d%d", seq.Add(1)) },
		MissingDestination: func(*testing.T) string {
			return fmt.Sprintf("missing.d%d", seq.Add(1))
		},
		Receive: func(ctx context.Context, t *testing.T, dest string, n int) []outboxtest.Received {
			return receive(ctx, t, js, ts, dest, n)
		},
		Quiet: quiet,
	}
	outboxtest.RunPublisherSuite(t, h, outboxtest.Features{ServerDedupe: true, KeyOrder: true, CloudEvents: true})
}

// receive reads dest back in stream order and decodes every message.
func receive(ctx context.Context, t *testing.T, js jetstream.JetStream, ts testStream, dest string, n int) []outboxtest.Received {
	t.Helper()
	msgs := fetchAll(ctx, t, js, ts, ts.Prefix+dest, n, quiet)
	out := make([]outboxtest.Received, len(msgs))
	for i, msg := range msgs {
		e, err := natspub.DecodeJetStream(msg)
		require.NoError(t, err)
		out[i] = outboxtest.Received{Destination: strings.TrimPrefix(msg.Subject(), ts.Prefix), Event: e, Attributes: attributes(t, msg)}
	}
	return out
}

// attributes reads the CloudEvents attributes of msg as the NATS binding
// defines them, independently of Decode: ce- headers in any case, values
// percent-decoded.
func attributes(t *testing.T, msg jetstream.Msg) map[string]string {
	attrs := map[string]string{}
	for k, v := range msg.Headers() {
		name := strings.ToLower(k)
		if !strings.HasPrefix(name, "ce-") {
			continue
		}
		value, err := url.PathUnescape(v[0])
		require.NoError(t, err, k)
		attrs[strings.TrimPrefix(name, "ce-")] = value
	}
	return attrs
}
