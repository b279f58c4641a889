package integration_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// localNATS is used when it answers with JetStream (.ci/run starts it);
// NATS_URL overrides it and must answer. Otherwise, or with
// PGOUTBOX_IT_NATS_EMBEDDED=1, each test starts a server in process.
const localNATS = "nats://127.0.0.1:4222"

// TestNATSEndToEndKillAndRecover: 10,000 events (1,000 with -short) emitted
// by 4 writers in business transactions reach a JetStream consumer through
// a dispatcher that is SIGKILLed mid-batch and a second replica that
// recovers its leases and re-publishes. Every event arrives, and none
// twice: the stream's Duplicates window (longer than the test) drops the
// re-published ones by Nats-Msg-Id.
func TestNATSEndToEndKillAndRecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	url := natsServer(t)

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	tag := e2eTag()
	prefix := "e2e." + tag + "."
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       "PGOUTBOX_E2E_" + tag,
		Subjects:   []string{prefix + ">"},
		Duplicates: 10 * time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream.CachedInfo().Config.Name) })

	// The consumer: an ordered consumer hands out every stored message
	// once, so the counts are the stream's content.
	got := newTally()
	consumeStream(t, stream, func(e outbox.Event) { got.add(e.ID) })

	n := e2eEvents()
	res := runKillScenario(t, db, e2eBroker{
		Kind: "nats", Addr: url, Prefix: prefix,
		Stored: func(ctx context.Context) (int, error) {
			info, err := stream.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int(info.State.Msgs), nil
		},
	}, got, n)

	for _, id := range res.Emitted {
		require.Equal(t, 1, res.Counts[id], "event %s arrived %d times", id, res.Counts[id])
	}
	require.Equal(t, n, res.Total)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs)
	t.Logf("nats: %d events re-published after the kill were dropped by the stream as duplicates", res.Republished)
}

// consumeStream hands every message stored in stream, decoded with
// natspub.DecodeJetStream, to on until the test ends; an ordered consumer
// hands out each stored message once. A message that is not an event, or
// whose Nats-Msg-Id is not its event ID, fails the test.
func consumeStream(t *testing.T, stream jetstream.Stream, on func(outbox.Event)) {
	t.Helper()
	cons, err := stream.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		e, err := natspub.DecodeJetStream(msg)
		if err != nil {
			t.Errorf("not an event: %v", err)
			return
		}
		if id := msg.Headers().Get(jetstream.MsgIDHeader); id != e.ID.String() {
			t.Errorf("Nats-Msg-Id %q, event ID %s", id, e.ID)
		}
		on(e)
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
}

// newNATSPublisher connects to url and returns a natspub Publisher for
// subjects under prefix.
func newNATSPublisher(url, prefix string) (outbox.Publisher, func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return p, nc.Close, nil
}

// natsServer returns NATS_URL, the local server when it answers with
// JetStream, or a server started in process for this test.
func natsServer(t *testing.T) string {
	t.Helper()
	embedded := os.Getenv("PGOUTBOX_IT_NATS_EMBEDDED") == "1"
	if url := os.Getenv("NATS_URL"); url != "" && !embedded {
		require.NoError(t, probeNATS(url), "NATS_URL %s", url)
		return url
	}
	if !embedded && probeNATS(localNATS) == nil {
		return localNATS
	}
	return embeddedNATS(t)
}

// embeddedNATS starts a server with JetStream and every other default
// (max_payload 1 MiB among them) in process for this test, and returns
// its URL.
func embeddedNATS(t *testing.T) string {
	t.Helper()
	return startNATS(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}).ClientURL()
}

// probeNATS checks that url answers and has JetStream.
func probeNATS(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("no JetStream: %w", err)
	}
	return nil
}
