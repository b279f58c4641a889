package amqppub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// brokerAddr is the host:port of the test broker.
func brokerAddr(tb testing.TB) string {
	tb.Helper()
	u, err := amqpParse(amqpURL)
	require.NoError(tb, err)
	return u
}

// allStored reports whether every message of a Publish that returned
// errs was stored, and fails the test when one failed permanently or an
// error is not clean.
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

// proxiedPublisher returns a proxy to the tests' broker and a Publisher
// connected through it with cfg (its URL set to the proxy's), once a
// message to dest is stored: connected, dest's exchange known.
func proxiedPublisher(ctx context.Context, t *testing.T, cfg amqppub.Config, dest string) (*proxy, *amqppub.Publisher) {
	t.Helper()
	px := newProxy(t, brokerAddr(t))
	cfg.URL = px.url()
	p := newPublisher(t, cfg)
	publishUntilStored(ctx, t, p, messages(dest, 1))
	return px, p
}

// exchangePerDestination routes each message to the exchange its
// destination names, with routing key "k".
func exchangePerDestination(rp amqppub.RouteParams) (amqppub.Route, error) {
	return amqppub.Route{Exchange: rp.Destination, RoutingKey: "k"}, nil
}

// publishUntilStored publishes msgs until every one is stored or ctx
// ends, and fails the test in the second case.
func publishUntilStored(ctx context.Context, t *testing.T, p *amqppub.Publisher, msgs []outbox.Message) {
	t.Helper()
	for ctx.Err() == nil && !allStored(t, p.Publish(ctx, msgs)) {
	}
	require.NoError(t, ctx.Err(), "the messages were never all stored")
}

// TestConnectionLostMidBatch cuts the connection after the broker
// confirmed the first messages of a batch: the confirmed ones succeed,
// the others fail as an outage, none permanently; the next call dials
// again and publishes.
func TestConnectionLostMidBatch(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	q := a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{Exchange: x, MaxInFlight: 8}, "d") // connected, exchange known

	px.cutAfterAcks(1)
	msgs := messages("d", 500)
	errs := p.Publish(ctx, msgs)
	stored := 0
	for i, err := range errs {
		if err == nil {
			stored++
			continue
		}
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
		require.False(t, outbox.IsPermanent(err), "message %d: %v", i, err)
		requireClean(t, err)
	}
	require.Positive(t, stored, "the first confirm passed before the cut")
	require.Less(t, stored, len(msgs), "the cut came before the last confirm")

	publishUntilStored(ctx, t, p, msgs) // redials
	require.GreaterOrEqual(t, depth(t, a, q), 1+len(msgs))
}

// TestConfirmTimeout stalls everything the broker sends: Publish reports
// ErrConfirmTimeout, an outage, and once the broker is heard again the
// Publisher recovers on a new connection.
func TestConfirmTimeout(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{Exchange: x, ConfirmTimeout: 100 * time.Millisecond}, "d")

	px.stallDown()
	for i, err := range p.Publish(ctx, messages("d", 3)) {
		require.ErrorIs(t, err, amqppub.ErrConfirmTimeout, "message %d", i)
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
		require.False(t, outbox.IsPermanent(err), "message %d: %v", i, err)
	}
	px.resume()
	publishUntilStored(ctx, t, p, messages("d", 3))
}

// TestBlockedConnection injects connection.blocked (a proxy plays the
// broker's resource alarm, so the test needs no change to the shared
// broker and runs in parallel): a call made while blocked fails at once
// with ErrBlocked, an outage, sending nothing; a call waiting for confirms
// when the block comes fails at once too, although its ConfirmTimeout is
// ten minutes, the messages it had not sent yet (the window is full)
// included; after connection.unblocked the Publisher publishes again.
func TestBlockedConnection(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{Exchange: x, ConfirmTimeout: amqppub.MaxConfirmTimeout, MaxInFlight: 2}, "d")

	// Blocked while waiting: the confirms are held back, then the block
	// arrives.
	px.stallDown()
	before := px.clientBytes.Load()
	done := make(chan []error, 1)
	go func() { done <- p.Publish(ctx, messages("d", 3)) }()
	for px.clientBytes.Load() == before && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // until the publishes reach the proxy
	}
	px.block(t)
	for i, err := range <-done {
		require.ErrorIs(t, err, amqppub.ErrBlocked, "message %d", i)
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
	}
	px.resume()

	// Blocked before the call: it fails before sending.
	for i, err := range p.Publish(ctx, messages("d", 2)) {
		require.ErrorIs(t, err, amqppub.ErrBlocked, "message %d", i)
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
	}

	px.unblock(t)
	publishUntilStored(ctx, t, p, messages("d", 2))
}

// TestClosedPublisher: calls after Close report ErrClosed.
func TestClosedPublisher(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, amqppub.Config{})
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	for _, err := range p.Publish(runContext(t), messages("d", 2)) {
		require.ErrorIs(t, err, amqppub.ErrClosed)
		require.False(t, outbox.IsPermanent(err))
	}
}

// TestStalledBeforePublishing: with the broker stalled, a call that must
// first check a new exchange returns when its ctx's deadline passes,
// every message unavailable, rather than wait for the connection's
// heartbeat to give up.
func TestStalledBeforePublishing(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	x, y := a.exchange(t), a.exchange(t)
	a.queue(t, x, "#", nil)
	a.queue(t, y, "#", nil)
	px, p := proxiedPublisher(runContext(t), t, amqppub.Config{RouteFunc: exchangePerDestination}, x) // connected; y is not checked yet

	px.stallDown()
	ctx, cancel := context.WithTimeout(runContext(t), 100*time.Millisecond)
	defer cancel()
	for i, err := range p.Publish(ctx, messages(y, 2)) {
		require.ErrorIs(t, err, context.DeadlineExceeded, "message %d", i)
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
	}
	px.resume()
	publishUntilStored(runContext(t), t, p, messages(y, 2))
}

// TestConcurrentPublish: calls from several goroutines at once, each on a
// channel of its own, all succeed, and the queue holds every message.
func TestConcurrentPublish(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	q := a.queue(t, x, "#", nil)
	p := newPublisher(t, amqppub.Config{Exchange: x, IdleChannels: 2, MaxInFlight: 16})
	const callers, calls, size = 6, 5, 40
	errs := make(chan error, callers*calls*size)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				for _, err := range p.Publish(ctx, messages("d", size)) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, callers*calls*size, depth(t, a, q))
}

// TestCloseWhileStalled: with the broker alive (it sends heartbeats, so
// the connection never times out) but stuck, reading and answering
// nothing, Close returns
// rather than wait for the answer to its close, which never comes (it
// used to wait for ever, holding the Publisher's mutex), and later calls
// report ErrClosed.
func TestCloseWhileStalled(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	a.queue(t, x, "#", nil)
	px := newProxy(t, brokerAddr(t))
	p, err := amqppub.New(amqppub.Config{URL: px.url(), Exchange: x, ConfirmTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	publishUntilStored(ctx, t, p, messages("d", 1)) // connected

	px.stallBoth()
	beating := make(chan struct{})
	defer close(beating)
	go px.beatUntil(beating)
	_ = p.Close() // must return; an error is allowed, the broker never answered
	for _, err := range p.Publish(ctx, messages("d", 1)) {
		require.ErrorIs(t, err, amqppub.ErrClosed)
	}
}

// TestStalledOpeningChannel: with the broker alive (heartbeats) but
// answering nothing, a call that must check an exchange (on a channel
// of its own) fails after ConfirmTimeout with ErrConfirmTimeout, an
// outage, although its ctx lasts as long as the test; the connection is
// dropped, and once the broker answers again the next call dials and
// publishes.
func TestStalledOpeningChannel(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x, y := a.exchange(t), a.exchange(t)
	a.queue(t, x, "#", nil)
	a.queue(t, y, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{ConfirmTimeout: 100 * time.Millisecond, RouteFunc: exchangePerDestination}, x) // connected; y not checked yet

	px.stallDown()
	beating := make(chan struct{})
	go px.beatUntil(beating)
	for i, err := range p.Publish(ctx, messages(y, 2)) {
		require.ErrorIs(t, err, amqppub.ErrConfirmTimeout, "message %d", i)
		require.True(t, outbox.IsUnavailable(err), "message %d: %v", i, err)
	}
	close(beating)
	px.resume()
	publishUntilStored(ctx, t, p, messages(y, 2))
}

// TestStalledAfterCancel: with the broker alive (heartbeats) but
// answering nothing, a call cancelled while it waits for confirms leaves
// a channel to close that the broker never answers; the Publisher drops
// the connection after ConfirmTimeout rather than keep it, and a
// goroutine, for ever.
func TestStalledAfterCancel(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{Exchange: x, ConfirmTimeout: 100 * time.Millisecond}, "d")

	requireDroppedAfterCancel(ctx, t, px, p, messages("d", 1))
}

// requireDroppedAfterCancel stalls the broker (heartbeats only), starts
// publishing msgs, cancels the call once its first bytes reach the proxy,
// and requires a retryable error and then the connection dropped by the
// Publisher.
func requireDroppedAfterCancel(ctx context.Context, t *testing.T, px *proxy, p *amqppub.Publisher, msgs []outbox.Message) {
	t.Helper()
	px.stallDown()
	beating := make(chan struct{})
	defer close(beating)
	go px.beatUntil(beating)
	call, cancel := context.WithCancel(ctx)
	sent := px.clientBytes.Load()
	done := make(chan []error, 1)
	go func() { done <- p.Publish(call, msgs) }()
	for px.clientBytes.Load() == sent && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // until the call's first frame reaches the proxy
	}
	cancel()
	err := (<-done)[0] // cancelled, or (on a loaded machine) timed out first
	require.Error(t, err)
	require.False(t, outbox.IsPermanent(err), "%v", err)
	for px.ended.Load() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // until the client closes its socket
	}
	require.NoError(t, ctx.Err(), "the stalled connection was never dropped")
}

// TestStalledOpeningAfterCancel: as TestStalledAfterCancel, for a call
// cancelled while it opens its channel: the Publisher drops the
// connection after ConfirmTimeout rather than keep it, and a goroutine,
// for ever.
func TestStalledOpeningAfterCancel(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{ConfirmTimeout: 100 * time.Millisecond, RouteFunc: exchangePerDestination}, x)

	y := a.exchange(t) // not checked yet: the call opens a channel to check it
	requireDroppedAfterCancel(ctx, t, px, p, messages(y, 1))
}

// TestCloseDuringPublish: Close while calls are publishing: each message
// reports success or a retryable error, none permanent, and every
// success is stored (the queue holds at least as many messages).
func TestCloseDuringPublish(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	x := a.exchange(t)
	q := a.queue(t, x, "#", nil)
	px, p := proxiedPublisher(ctx, t, amqppub.Config{Exchange: x, MaxInFlight: 4}, "d")

	const callers = 3
	results := make(chan []error, callers)
	sent := px.clientBytes.Load()
	for range callers {
		go func() { results <- p.Publish(ctx, messages("d", 2000)) }()
	}
	for px.clientBytes.Load() == sent && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // until publishing has begun
	}
	_ = p.Close()
	succeeded := 1
	for range callers {
		for i, err := range <-results {
			if err == nil {
				succeeded++
				continue
			}
			require.False(t, outbox.IsPermanent(err), "message %d: %v", i, err)
			requireClean(t, err)
		}
	}
	require.GreaterOrEqual(t, depth(t, a, q), succeeded)
}
