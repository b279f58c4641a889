package natspub_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// TestServerOutage stops the server under a publisher, brings it back on
// the same port without JetStream, then with JetStream on the same store:
// while it is down and while no stream answers, every failure is
// retryable; once JetStream is back, the events are stored, once each.
func TestServerOutage(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	dir := t.TempDir()
	s, err := startServer(&server.Options{StoreDir: dir})
	require.NoError(t, err)
	port := s.Addr().(*net.TCPAddr).Port
	js := connect(t, s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	nc := js.Conn()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTAGE", Subjects: []string{"outage.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	p, err := natspub.New(js, natspub.Config{AckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	msgs := messages("outage.x", 3)

	s.Shutdown()
	s.WaitForShutdown()
	errs := p.Publish(ctx, msgs)
	require.False(t, allStored(t, errs), "the server is down")
	for _, err := range errs {
		require.True(t, outbox.IsUnavailable(err), "server down: %v", err)
	}

	// Back without JetStream: the server answers "no responders", as it
	// does while JetStream is not ready.
	s, err = startServer(&server.Options{Port: port})
	require.NoError(t, err)
	require.True(t, awaitConnected(ctx, nc), "no reconnection")
	errs = p.Publish(ctx, msgs)
	require.False(t, allStored(t, errs), "JetStream is off")
	require.ErrorIs(t, errs[0], jetstream.ErrNoStreamResponse)
	s.Shutdown()
	s.WaitForShutdown()

	s, err = startServer(&server.Options{StoreDir: dir, Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	for ctx.Err() == nil && !allStored(t, p.Publish(ctx, msgs)) {
	}
	require.NoError(t, ctx.Err(), "the events were not stored once JetStream was back")
	stream, err := js.Stream(ctx, "OUTAGE")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(msgs)), info.State.Msgs, "re-sends are absorbed by Nats-Msg-Id")
}

// awaitConnected waits until nc is connected, and reports whether it is
// before ctx ends.
func awaitConnected(ctx context.Context, nc *nats.Conn) bool {
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// allStored reports whether every message of a Publish that returned
// errs was stored, and fails the test when one failed permanently.
func allStored(t *testing.T, errs []error) bool {
	t.Helper()
	ok := true
	for i, err := range errs {
		if err != nil {
			require.False(t, outbox.IsPermanent(err), "message %d: %v", i, err)
			requireClean(t, err)
			ok = false
		}
	}
	return ok
}

// TestClosedConnectionUnavailable: a publisher whose connection was closed
// reports every message unavailable.
func TestClosedConnectionUnavailable(t *testing.T) {
	t.Parallel()
	js := connect(t, natsURL)
	p, err := natspub.New(js, natspub.Config{})
	require.NoError(t, err)
	js.Conn().Close()
	for _, err := range p.Publish(context.Background(), messages("closed.x", 2)) {
		require.ErrorContains(t, err, nats.ErrConnectionClosed.Error()) // formatted, not wrapped, by the client
		require.True(t, outbox.IsUnavailable(err), "%v", err)
		require.False(t, outbox.IsPermanent(err), "%v", err)
	}
}
