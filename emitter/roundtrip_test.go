package emitter_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// tripCounter counts round trips on a connection: a write that follows a
// read starts a new one. A request written in several pieces counts once;
// a reply that interrupted a write would count twice, so the count never
// errs low.
// It also counts COPY statements, as a pgx tracer.
type tripCounter struct {
	mu       sync.Mutex
	trips    int
	readSeen bool
	copies   int
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.copies++
	return ctx
}

func (c *tripCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (c *tripCounter) wrote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readSeen {
		c.trips++
		c.readSeen = false
	}
}

func (c *tripCounter) read() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readSeen = true
}

// reset starts a new count; the next write is the first round trip.
func (c *tripCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips, c.readSeen, c.copies = 0, true, 0
}

// count returns the round trips and the COPY statements since reset.
func (c *tripCounter) count() (trips, copies int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips, c.copies
}

type countingConn struct {
	net.Conn
	counter *tripCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.counter.wrote()
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.counter.read()
	}
	return n, err
}

// countingConnect opens a connection on the bundle's schema whose round
// trips are counted.
func (b *testBundle) countingConnect(t *testing.T) (*pgx.Conn, *tripCounter) {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = b.db.Schema
	counter := &tripCounter{}
	cfg.Tracer = counter
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, counter: counter}, nil
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, counter
}

// TestEmitRoundTrips checks that 499 events (the most the INSERT takes) and
// the notify take two round trips on a cold statement cache (prepare, then
// execute) and one on a warm one, as one event does (with the notify, and
// into a log without it), and which batches go by COPY (from 500 events). COPY streams, so the server's reply
// overlaps the data and round trips are not counted for it.
func TestEmitRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{NotifyEveryEmit: true}) // every Emit notifies
	events := manyEvents(499, 0)

	t.Run("ColdStatementCache", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		trips, copies := emitCounting(t, b.emitter, conn, counter, events)
		require.Equal(t, []int{2, 0}, []int{trips, copies})
	})

	t.Run("LargeBatchGoesByCopy", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		_, copies := emitCounting(t, b.emitter, conn, counter, manyEvents(500, 0))
		require.Equal(t, 1, copies)
	})

	t.Run("LargeDelayedBatchGoesByCopy", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		_, copies := emitCounting(t, b.emitter, conn, counter, manyEvents(5000, time.Second))
		require.Equal(t, 1, copies)
	})

	t.Run("MiBOfPayloadGoesByCopy", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		big := manyEvents(2, time.Second)
		for i := range big {
			big[i].Payload = []byte(`"` + strings.Repeat("x", 512<<10) + `"`)
		}
		_, copies := emitCounting(t, b.emitter, conn, counter, big)
		require.Equal(t, 1, copies)
	})

	t.Run("OneEvent", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		one := manyEvents(1, time.Second)
		cold, _ := emitCounting(t, b.emitter, conn, counter, one)
		warm, _ := emitCounting(t, b.emitter, conn, counter, one)
		require.Equal(t, []int{2, 1}, []int{cold, warm})
	})

	t.Run("OneEventIntoLogWithoutNotify", func(t *testing.T) {
		t.Parallel()
		logB := setupKind(t, outbox.KindLog, emitter.Config{})
		conn, counter := logB.countingConnect(t)
		one := manyEvents(1, 0)
		cold, _ := emitCounting(t, logB.emitter, conn, counter, one)
		warm, _ := emitCounting(t, logB.emitter, conn, counter, one)
		require.Equal(t, []int{2, 1}, []int{cold, warm})
	})

	t.Run("WarmStatementCache", func(t *testing.T) {
		t.Parallel()
		conn, counter := b.countingConnect(t)
		emitCounting(t, b.emitter, conn, counter, events)
		trips, copies := emitCounting(t, b.emitter, conn, counter, events)
		require.Equal(t, []int{1, 0}, []int{trips, copies})
	})
}

// manyEvents returns n valid events, the last delayed by delay.
func manyEvents(n int, delay time.Duration) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = validEvent()
	}
	events[n-1].Delay = delay
	return events
}

// emitCounting emits events in a transaction on conn and returns the round
// trips and COPY statements of Emit (not counting begin and commit).
func emitCounting(t *testing.T, e *emitter.Emitter, conn *pgx.Conn, counter *tripCounter, events []outbox.Event) (trips, copies int) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	counter.reset()
	_, err = e.Emit(ctx, tx, events...)
	require.NoError(t, err)
	trips, copies = counter.count()
	require.NoError(t, tx.Commit(ctx))
	return trips, copies
}
