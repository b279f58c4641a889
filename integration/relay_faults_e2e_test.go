package integration_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// TestRelayKafkaOutage stops every broker of a kfake cluster under a
// kafkapub publisher and relays events: each call times out
// unacknowledged (unavailable), so the relay's circuit opens and probes,
// spending no retry, parking nothing and leaving its cursor. The cluster
// restarted on the same address and data directory then takes every
// event, in per-key order.
func TestRelayKafkaOutage(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	dir := t.TempDir()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir))
	require.NoError(t, err)
	seeds := cluster.ListenAddrs()
	prefix := "relay-" + e2eTag() + "."
	require.NoError(t, cluster.CreateTopic(prefix+relayDest, 1, nil))
	kpub, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: prefix}, kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(kpub.Close)
	cluster.Close() // every broker down

	rig := newRelayRig(t, ctx, "a", "b", "c")
	emitOutageEvents(t, ctx, rig)
	pub := &countingPublisher{inner: kpub}
	rl := rig.startRelay(t, ctx, pub, relayOutageConfig)
	awaitRelayOutage(t, ctx, rig, rl, pub)

	restarted, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.Ports(portOf(t, seeds[0])))
	require.NoError(t, err)
	t.Cleanup(restarted.Close)
	got := newRelayConsumer()
	consumeKafka(t, seeds, prefix+relayDest, got.add)
	awaitArrived(t, ctx, got, rig.committedIDs())
	dups := requireRecovered(t, ctx, rig, rl, got)
	t.Logf("kafka: %d duplicates after the outage (at-least-once: a record produced by a call that gave up may be kept)", dups)
}

// TestRelayNATSOutage stops an embedded nats-server under a natspub
// publisher and relays events: acks time out and the server answers
// nothing (unavailable), so the relay's circuit opens and probes, spending
// no retry, parking nothing and leaving its cursor. The server restarted
// on the same port and store takes every event, stored once.
func TestRelayNATSOutage(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}
	srv := startNATS(t, opts)
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	tag := e2eTag()
	prefix := "relay." + tag + "."
	_, stream := createNATSStream(t, ctx, url, "PGOUTBOX_RELAY_OUTAGE_"+tag, prefix+">")
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	npub, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix, AckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	srv.Shutdown()
	srv.WaitForShutdown()

	rig := newRelayRig(t, ctx, "a", "b", "c")
	emitOutageEvents(t, ctx, rig)
	pub := &countingPublisher{inner: npub}
	rl := rig.startRelay(t, ctx, pub, relayOutageConfig)
	awaitRelayOutage(t, ctx, rig, rl, pub)

	startNATS(t, opts)
	got := newRelayConsumer()
	consumeStream(t, stream, got.add)
	awaitArrived(t, ctx, got, rig.committedIDs())
	require.Zero(t, requireRecovered(t, ctx, rig, rl, got), "the stream stored an event twice")
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(rig.committedIDs())), info.State.Msgs, "re-sends are absorbed by Nats-Msg-Id")
}

// relayMaxMsg is the largest message the parking tests' topic or stream
// takes; relayTooLarge a payload size over it, even compressed.
const (
	relayMaxMsg   = 4096
	relayTooLarge = 4 * relayMaxMsg
)

// TestRelayParksRefusedKey: an event too large for the stream (natspub:
// the stream's max message size) or the topic (kafkapub: the topic's
// max.message.bytes, MessageTooLarge) is refused for good, so the relay
// parks it and its key: the key's later events are parked behind it, in
// the same batch and in later ones, unpublished, while the other keys
// keep flowing in order. The parked key and events are what admin lists.
// Each broker runs with the publisher's KeyOrder off and on.
func TestRelayParksRefusedKey(t *testing.T) {
	t.Parallel()
	forEachRelayBroker(t, relayMaxMsg, runRelayParksRefusedKey)
}

func runRelayParksRefusedKey(t *testing.T, b relayBroker) {
	ctx := testctx.New(t)
	rig := newRelayRig(t, ctx, "bad", "k1", "k2")
	got := newRelayConsumer()
	b.consume(t, got.add)
	rl := rig.startRelay(t, ctx, b.pub, nil)

	// bad v1 goes through; v2 is refused; v3 follows it (same or next batch).
	require.NoError(t, rig.emit(ctx, "bad", 1, 0, false))
	require.NoError(t, rig.emit(ctx, "k1", 2, 0, false))
	require.NoError(t, rig.emit(ctx, "bad", 1, relayTooLarge, false))
	require.NoError(t, rig.emit(ctx, "bad", 1, 0, false))
	require.NoError(t, rig.emit(ctx, "k2", 2, 0, false))
	awaitArrived(t, ctx, got, rig.committedIDs("k1", "k2"))
	awaitParked(t, ctx, rig, 2)

	// After the key is parked: its next event is parked unpublished, the
	// other keys' are published.
	require.NoError(t, rig.emit(ctx, "bad", 1, 0, false))
	require.NoError(t, rig.emit(ctx, "k1", 1, 0, false))
	require.NoError(t, rig.emit(ctx, "k2", 1, 0, false))
	awaitArrived(t, ctx, got, rig.committedIDs("k1", "k2"))
	awaitParked(t, ctx, rig, 3)
	awaitCaughtUp(t, ctx, rig)

	requireDelivered(t, rig, got, "k1", "k2")
	bad := rig.eventsOf("bad")
	got.mu.Lock()
	require.Equal(t, 1, got.counts[bad[0].ID], "bad's first event, before the refused one")
	for _, e := range bad[1:] {
		require.Zero(t, got.counts[e.ID], "a parked event was published: v%s", e.Headers["x-v"])
	}
	got.mu.Unlock()

	keys, err := rig.adm.ParkedKeys(ctx, relayGroup, admin.ParkedKeysQuery{})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "bad", keys[0].Key)
	require.EqualValues(t, 3, keys[0].Events)
	require.Equal(t, string(outbox.CodePublishError), keys[0].ErrorCode, keys[0].Error)
	parked, err := rig.adm.ParkedEvents(ctx, relayGroup, admin.ParkedEventsQuery{WithPayload: true})
	require.NoError(t, err)
	require.Len(t, parked, 3)
	codes := []string{string(outbox.CodePublishError), "key_parked", "key_parked"}
	for i, p := range parked {
		want := bad[1+i]
		require.Equal(t, want.ID, p.ID, "parked event %d, in seq order", i)
		require.Equal(t, "bad", p.Key)
		require.Equal(t, codes[i], p.ErrorCode, p.Error)
		require.Equal(t, want.Payload, p.Payload)
		require.Equal(t, want.Headers, p.Headers)
	}
	require.NotContains(t, parked[0].Error, `"key":"bad"`, "an error holds no payload")
	st := rl.Stats()
	require.EqualValues(t, 3, st.Parked)
	require.EqualValues(t, 1, st.KeysParked)
	require.Zero(t, st.Retries, "a permanent refusal is not retried")
	t.Logf("%s: parked for %s: %s", b.kind, parked[0].ErrorCode, parked[0].Error)
}

// awaitParked waits until the group has parked n events.
func awaitParked(t *testing.T, ctx context.Context, rig *relayRig, n int) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%d events parked", n), func() (bool, string) {
		evs, err := rig.adm.ParkedEvents(ctx, relayGroup, admin.ParkedEventsQuery{})
		if err != nil {
			return false, err.Error()
		}
		return len(evs) == n, fmt.Sprintf("%d parked", len(evs))
	})
}

// eventsOf returns the committed events of key in commit order.
func (r *relayRig) eventsOf(key string) []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	byV := map[int64]outbox.Event{}
	var vs []int64
	for _, e := range r.committed {
		if e.event.PartitionKey == key {
			byV[e.v] = e.event
			vs = append(vs, e.v)
		}
	}
	out := make([]outbox.Event, 0, len(vs))
	for v := int64(1); len(out) < len(vs); v++ {
		out = append(out, byV[v])
	}
	return out
}

// TestRelayReplayAndSkipParkedKeys: two keys are parked by a refused
// event and one after it. Skip (admin.RequestSkip) drops one key's parked
// events unpublished and unparks it: its next event is published. Replay
// (admin.RequestReplay), once the stream's or topic's limit is lifted,
// publishes the other key's parked events, then its next one, in commit
// order. Other keys flow meanwhile, and nothing is left parked.
func TestRelayReplayAndSkipParkedKeys(t *testing.T) {
	t.Parallel()
	forEachRelayBroker(t, relayMaxMsg, func(t *testing.T, b relayBroker) {
		ctx := testctx.New(t)
		rig := newRelayRig(t, ctx, "replayed", "skipped", "k1")
		got := newRelayConsumer()
		b.consume(t, got.add)
		rig.startRelay(t, ctx, b.pub, nil)
		for _, key := range []string{"replayed", "skipped"} {
			require.NoError(t, rig.emit(ctx, key, 1, relayTooLarge, false))
			require.NoError(t, rig.emit(ctx, key, 1, 0, false))
		}
		awaitParked(t, ctx, rig, 4)

		require.NoError(t, rig.adm.RequestSkip(ctx, relayGroup, "skipped"))
		awaitParkedKeys(t, ctx, rig, "replayed")
		require.NoError(t, rig.emit(ctx, "skipped", 1, 0, false))
		b.unlimit(t, ctx)
		require.NoError(t, rig.adm.RequestReplay(ctx, relayGroup, "replayed"))
		awaitParkedKeys(t, ctx, rig)
		require.NoError(t, rig.emit(ctx, "replayed", 1, 0, false))
		require.NoError(t, rig.emit(ctx, "k1", 1, 0, false))

		skipped := rig.eventsOf("skipped")
		awaitArrived(t, ctx, got, append(rig.committedIDs("replayed", "k1"), skipped[2].ID))
		awaitCaughtUp(t, ctx, rig)
		requireDelivered(t, rig, got, "replayed", "k1")
		got.mu.Lock()
		defer got.mu.Unlock()
		require.Zero(t, got.counts[skipped[0].ID], "a skipped event was published")
		require.Zero(t, got.counts[skipped[1].ID], "a skipped event was published")
		evs, err := rig.adm.ParkedEvents(ctx, relayGroup, admin.ParkedEventsQuery{})
		require.NoError(t, err)
		require.Empty(t, evs)
	})
}

// awaitParkedKeys waits until the group's parked keys are keys.
func awaitParkedKeys(t *testing.T, ctx context.Context, rig *relayRig, keys ...string) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("parked keys %q", keys), func() (bool, string) {
		ks, err := rig.adm.ParkedKeys(ctx, relayGroup, admin.ParkedKeysQuery{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, k := range ks {
			names = append(names, k.Key)
		}
		return fmt.Sprint(names) == fmt.Sprint(keys), fmt.Sprintf("%q", names)
	})
}
