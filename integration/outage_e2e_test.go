package integration_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// outageEvents is how many events the outage tests emit while the broker
// is down.
const outageEvents = 20

// TestKafkaOutageSpendsNoAttempts stops every broker of a kfake cluster
// under a kafkapub publisher, emits events and dispatches them: each call
// times out unacknowledged, which kafkapub reports as unavailable, so the
// dispatcher's circuit opens and probes while no event spends an
// attempt. A cluster restarted on the same address and data directory
// (same topic IDs) then takes every event, each SENT at its first
// attempt.
func TestKafkaOutageSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	dir := t.TempDir()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir))
	require.NoError(t, err)
	seeds := cluster.ListenAddrs()
	prefix := "e2e-" + e2eTag() + "."
	require.NoError(t, cluster.CreateTopic(prefix+brokerDest, 1, nil))
	pub, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: prefix}, kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	cluster.Close() // every broker down

	db := pgtest.NewMigrated(t)
	ids := emitEvents(t, ctx, db, outageEvents, nil)
	d := startOutageDispatcher(t, ctx, db, pub)
	awaitOutage(t, ctx, db, d, len(ids))

	restarted, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.Ports(portOf(t, seeds[0])))
	require.NoError(t, err)
	t.Cleanup(restarted.Close)
	got := newReceived()
	consumeKafka(t, seeds, prefix+brokerDest, got.add)
	awaitRecovery(t, ctx, db, d, ids, got)
}

// TestNATSOutageSpendsNoAttempts stops an embedded nats-server under a
// natspub publisher, emits events and dispatches them: acks time out and
// the server answers nothing, which natspub reports as unavailable, so
// the circuit opens and probes while no event spends an attempt. The
// server restarted on the same port and store takes every event, each
// SENT at its first attempt and stored once.
func TestNATSOutageSpendsNoAttempts(t *testing.T) {
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
	prefix := "e2e." + tag + "."
	_, stream := createNATSStream(t, ctx, url, "PGOUTBOX_OUTAGE_"+tag, prefix+">")
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix, AckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	srv.Shutdown()
	srv.WaitForShutdown()

	db := pgtest.NewMigrated(t)
	ids := emitEvents(t, ctx, db, outageEvents, nil)
	d := startOutageDispatcher(t, ctx, db, pub)
	awaitOutage(t, ctx, db, d, len(ids))

	startNATS(t, opts)
	got := newReceived()
	consumeStream(t, stream, got.add)
	awaitRecovery(t, ctx, db, d, ids, got)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(ids)), info.State.Msgs, "re-sends are absorbed by Nats-Msg-Id")
}

// startNATS starts a nats-server with opts, shut down when the test ends.
func startNATS(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second), "in-process nats-server did not start")
	return srv
}

// startOutageDispatcher runs a dispatcher publishing every event to
// brokerDest through pub, with a short publish timeout and circuit
// backoff, until the test ends.
func startOutageDispatcher(t *testing.T, ctx context.Context, db *pgtest.DB, pub outbox.Publisher) *dispatcher.Dispatcher {
	t.Helper()
	return runDispatcher(t, ctx, db, dispatcher.Config{
		Publisher: pub, RouteFunc: func(outbox.Event) string { return brokerDest },
		PollInterval: 20 * time.Millisecond, PublishTimeout: 500 * time.Millisecond,
		CircuitMinBackoff: 50 * time.Millisecond, CircuitMaxBackoff: 200 * time.Millisecond,
	})
}

// awaitOutage waits until the dispatcher's circuit has opened and two
// probes after the first n returns failed too, then checks that no event
// spent an attempt.
func awaitOutage(t *testing.T, ctx context.Context, db *pgtest.DB, d *dispatcher.Dispatcher, n int) {
	t.Helper()
	waitFor(t, ctx, "the circuit open and probed twice", func() (bool, string) {
		s := d.Stats()
		var last string
		_ = db.Pool.QueryRow(ctx, "SELECT coalesce(max(last_error), '') FROM "+testdb.AllRows(db.Table())+" AS e").Scan(&last)
		return s.CircuitOpens == 1 && s.OutageReturned >= uint64(n+2), fmt.Sprintf("%+v last error: %s", s, last)
	})
	require.Zero(t, countRows(t, ctx, db, "attempts > 0 OR jsonb_array_length(attempt_log) > 0 OR status = 'FAILED'"),
		"an attempt was spent during the outage")
	require.Zero(t, d.Stats().Retried)
	require.NotEqual(t, dispatcher.CircuitClosed, d.Stats().Circuit)
}

// awaitRecovery waits until every event of ids is SENT and received, and
// checks that each was sent at its first attempt and that the circuit
// closed.
func awaitRecovery(t *testing.T, ctx context.Context, db *pgtest.DB, d *dispatcher.Dispatcher, ids []uuid.UUID, got *received) {
	t.Helper()
	awaitSentAndReceived(t, ctx, db, ids, got)
	require.Equal(t, len(ids), countRows(t, ctx, db, "attempts = 1 AND jsonb_array_length(attempt_log) = 0"),
		"every event SENT at its first attempt")
	s := d.Stats()
	require.Zero(t, s.Retried)
	require.Equal(t, dispatcher.CircuitClosed, s.Circuit)
}

// portOf returns the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

// awaitSentAndReceived waits until every event of ids is SENT and in got.
func awaitSentAndReceived(t *testing.T, ctx context.Context, db *pgtest.DB, ids []uuid.UUID, got *received) {
	t.Helper()
	waitFor(t, ctx, "every event to be SENT and received", func() (bool, string) {
		for _, id := range ids {
			if !got.has(id) {
				return false, "not received: " + id.String()
			}
		}
		n := countRows(t, ctx, db, "status = 'SENT'")
		return n == len(ids), fmt.Sprintf("%d of %d SENT", n, len(ids))
	})
}
