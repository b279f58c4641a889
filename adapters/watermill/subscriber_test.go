package pgwatermill_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// newSubscriber returns a Subscriber on db's table with cfg (table and
// logger filled in), closed at cleanup.
func newSubscriber(t *testing.T, db testDB, cfg dispatcher.Config) *pgwatermill.Subscriber {
	t.Helper()
	cfg.Table = db.Table
	cfg.Logger = quietLogger
	sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{Dispatcher: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	return sub
}

// receive returns the next message of ch, failing t when ch closes or
// the test's run context ends first.
func receive(ctx context.Context, t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "channel closed")
		return msg
	case <-ctx.Done():
		t.Fatal(context.Cause(ctx))
		return nil
	}
}

// drained waits for ch to close, acking nothing, and returns how many
// messages were still handed out.
func drained(ctx context.Context, t *testing.T, ch <-chan *message.Message) int {
	t.Helper()
	n := 0
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return n
			}
			n++
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{})

	canonical := message.NewMessage(watermill.NewUUID(), []byte(`{"total":42}`))
	canonical.Metadata = message.Metadata{
		"tenant":                           "acme",
		"empty":                            "",
		pgwatermill.MetadataPartitionKey:   "order-1",
		pgwatermill.MetadataAggregateType:  "order",
		pgwatermill.MetadataAggregateID:    "o-1",
		pgwatermill.MetadataContentType:    "application/json",
		pgwatermill.MetadataIdempotencyKey: "idem-1",
		pgwatermill.MetadataUUID:           "ignored: Publish sets it",
	}
	other := message.NewMessage(watermill.NewULID(), []byte("plain"))
	require.NoError(t, pub.Publish("order.created", canonical, other))

	// The reserved keys went to the event's fields, the rest to headers.
	var partitionKey, aggregateType, aggregateID, contentType, idem string
	var headers map[string]string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT partition_key, aggregate_type, aggregate_id, content_type,
		idempotency_key, headers FROM `+db.Table.String()+` WHERE id = $1`, uuid.MustParse(canonical.UUID)).
		Scan(&partitionKey, &aggregateType, &aggregateID, &contentType, &idem, &headers))
	require.Equal(t, []string{"order-1", "order", "o-1", "application/json", "idem-1"},
		[]string{partitionKey, aggregateType, aggregateID, contentType, idem})
	require.Equal(t, map[string]string{"tenant": "acme", "empty": ""}, headers)

	ch, err := sub.Subscribe(ctx, "order.created")
	require.NoError(t, err)
	got := map[string]*message.Message{}
	for range 2 {
		msg := receive(ctx, t, ch)
		got[msg.UUID] = msg
		require.True(t, msg.Ack())
	}
	require.Contains(t, got, canonical.UUID)
	require.Contains(t, got, other.UUID, "a non-UUID comes back as it was")
	wantMeta := maps.Clone(canonical.Metadata)
	delete(wantMeta, pgwatermill.MetadataUUID)
	require.Equal(t, wantMeta, got[canonical.UUID].Metadata)
	require.Equal(t, canonical.Payload, got[canonical.UUID].Payload)
	require.Empty(t, got[other.UUID].Metadata)

	otherID, _ := pgwatermill.EventID(other.UUID)
	require.Contains(t, rows(t, db), otherID, "the event ID of a non-UUID is its UUIDv5")
}

func TestNackRetriesSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{
		PollInterval: 50 * time.Millisecond, Backoff: outbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond, NoJitter: true},
	})
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("t", msg))

	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	first := receive(ctx, t, ch)
	require.True(t, first.Nack())
	<-first.Context().Done() // the outcome is being recorded
	second := receive(ctx, t, ch)
	require.Equal(t, msg.UUID, second.UUID)
	require.True(t, second.Ack())
	require.NoError(t, sub.Close())

	got := rows(t, db)[uuid.MustParse(msg.UUID)]
	require.Equal(t, row{Status: "SENT", Attempts: 2}, got)
}

func TestCloseGivesBackUnacked(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{Concurrency: 2})
	for range 3 {
		require.NoError(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x"))))
	}
	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	taken := receive(ctx, t, ch) // taken, never acknowledged; another waits to be handed out

	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	<-taken.Context().Done()
	drained(ctx, t, ch)
	require.NoError(t, <-closed)
	require.True(t, taken.Ack(), "an Ack after Close is accepted and changes nothing")

	for id, r := range rows(t, db) {
		require.Equal(t, row{Status: "PENDING"}, r, "event %s: back, unspent, not SENT", id)
	}
	_, err = sub.Subscribe(ctx, "t")
	require.ErrorIs(t, err, pgwatermill.ErrClosed)

	// A new subscriber gets all three.
	again := newSubscriber(t, db, dispatcher.Config{})
	ch, err = again.Subscribe(ctx, "t")
	require.NoError(t, err)
	seen := map[string]bool{}
	for len(seen) < 3 {
		msg := receive(ctx, t, ch)
		seen[msg.UUID] = true
		msg.Ack()
	}
}

func TestSubscribeContextEndGivesBack(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{})
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("t", msg))

	subCtx, cancel := context.WithCancel(ctx)
	ch, err := sub.Subscribe(subCtx, "t")
	require.NoError(t, err)
	taken := receive(ctx, t, ch)
	cancel()
	<-taken.Context().Done()
	drained(ctx, t, ch)
	require.Equal(t, row{Status: "PENDING"}, rows(t, db)[uuid.MustParse(msg.UUID)])
}

func TestSubscribersShareATopic(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	// Each holds at most Concurrency + Claimers × BatchSize = 3 events.
	cfg := dispatcher.Config{Concurrency: 1, BatchSize: 1}
	a, b := newSubscriber(t, db, cfg), newSubscriber(t, db, cfg)
	const n = 10
	for range n {
		require.NoError(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x"))))
	}
	chA, err := a.Subscribe(ctx, "t")
	require.NoError(t, err)
	chB, err := b.Subscribe(ctx, "t")
	require.NoError(t, err)

	// A holds its first message unacknowledged until B got one: B must,
	// since A holds at most 3 of the 10.
	heldByA := receive(ctx, t, chA)
	seen := map[string]int{heldByA.UUID: 1}
	firstOfB := receive(ctx, t, chB)
	seen[firstOfB.UUID]++
	heldByA.Ack()
	firstOfB.Ack()
	for total := 2; total < n; total++ {
		var msg *message.Message
		select {
		case msg = <-chA:
		case msg = <-chB:
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		}
		seen[msg.UUID]++
		msg.Ack()
	}
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Len(t, seen, n)
	for id, times := range seen {
		require.Equal(t, 1, times, id)
	}
	for id, r := range rows(t, db) {
		require.Equal(t, "SENT", r.Status, id)
	}
}

func TestUnsubscribedTopicStaysPending(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{})
	other := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("other", other)) // due first
	mine := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("mine", mine))

	ch, err := sub.Subscribe(ctx, "mine")
	require.NoError(t, err)
	msg := receive(ctx, t, ch) // the claim that took it passed "other" by
	require.Equal(t, mine.UUID, msg.UUID)
	msg.Ack()
	require.NoError(t, sub.Close())
	got := rows(t, db)
	require.Equal(t, "SENT", got[uuid.MustParse(mine.UUID)].Status)
	require.Equal(t, row{Status: "PENDING"}, got[uuid.MustParse(other.UUID)])
}

func TestSubscriberConfig(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	for field, cfg := range map[string]pgwatermill.SubscriberConfig{
		"Dispatcher.DrainTimeout":   {Dispatcher: dispatcher.Config{DrainTimeout: time.Second}},
		"Dispatcher.DefaultHandler": {Dispatcher: dispatcher.Config{DefaultHandler: func(context.Context, outbox.Event) error { return nil }}},
		"CloseTimeout":              {CloseTimeout: -1},
		"Dispatcher.Delivery":       {Dispatcher: dispatcher.Config{Delivery: dispatcher.AtMostOnce}},
		"BatchSize":                 {Dispatcher: dispatcher.Config{BatchSize: -1}},
	} {
		_, err := pgwatermill.NewSubscriber(db.Pool, cfg)
		var cerr *outbox.ConfigError
		require.ErrorAs(t, err, &cerr, field)
		require.Equal(t, field, cerr.Field)
	}
	_, err := pgwatermill.NewSubscriber(nil, pgwatermill.SubscriberConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
}

func TestAckDeadlineSnoozesUntakenMessage(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	sub := newSubscriber(t, db, dispatcher.Config{HandlerTimeout: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("t", msg))
	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)

	// Nobody reads ch: each handler call ends at its deadline with the
	// message never taken, a snooze that spends no attempt.
	id := uuid.MustParse(msg.UUID)
	for rows(t, db)[id].Snoozes < 2 {
		select {
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		case <-time.After(10 * time.Millisecond): // poll; bounded by the test's deadline
		}
	}
	got := rows(t, db)[id]
	require.Equal(t, 0, got.Attempts)
	require.NoError(t, sub.Close())
	drained(ctx, t, ch)
}

// A handler that reaches the channel after Close gave up waiting
// (CloseTimeout) finds it closed: it must give its event back, not send
// on the closed channel (a panic, which the dispatcher records as a
// failed attempt of an event no consumer saw). A middleware that ignores
// its context holds the handlers back past the Close.
func TestLateHandlerAfterCloseTimeoutGivesBack(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	const n = 8
	for range n {
		require.NoError(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x"))))
	}
	entered, release, returned := make(chan struct{}, n), make(chan struct{}), make(chan struct{}, n)
	stall := func(next outbox.Handler) outbox.Handler {
		return func(hctx context.Context, e outbox.Event) error {
			entered <- struct{}{}
			<-release // ignores hctx: a misbehaving middleware
			defer func() { returned <- struct{}{} }()
			return next(hctx, e)
		}
	}
	sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{
		// Long enough, on an idle machine, for the stop to cancel the
		// handlers (its hard stop) before Close gives up.
		CloseTimeout: 200 * time.Millisecond,
		Dispatcher: dispatcher.Config{
			Table: db.Table, Logger: quietLogger, Concurrency: n, BatchSize: n,
			Middleware: []outbox.Middleware{stall},
		},
	})
	require.NoError(t, err)
	ch, err := sub.Subscribe(ctx, "t")
	require.NoError(t, err)
	for range n {
		wait(ctx, t, entered)
	}
	require.ErrorIs(t, sub.Close(), context.DeadlineExceeded, "the handlers outlive CloseTimeout")
	require.Zero(t, drained(ctx, t, ch))
	close(release)
	for range n {
		wait(ctx, t, returned)
	}
	for !allPending(rows(t, db), n) { // the outcomes are recorded after Close returned
		select {
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		case <-time.After(10 * time.Millisecond): // poll; bounded by the test's deadline
		}
	}
	for id, r := range rows(t, db) {
		require.Equal(t, row{Status: "PENDING"}, r, "event %s: given back unspent", id)
	}
}

// wait takes one value from ch, failing t when the test's run context
// ends first.
func wait(ctx context.Context, t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal(context.Cause(ctx))
	}
}

// allPending reports whether got holds n events, all PENDING.
func allPending(got map[uuid.UUID]row, n int) bool {
	for _, r := range got {
		if r.Status != "PENDING" {
			return false
		}
	}
	return len(got) == n
}

// Close during a Subscribe whose start-up checks wait on a database that
// does not answer stops them: it returns, and so does Subscribe, with
// ErrClosed, instead of both waiting for Subscribe's ctx.
func TestCloseInterruptsSubscribeStart(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	silent, accepted := silentServer(t)
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+silent+"/test?sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sub, err := pgwatermill.NewSubscriber(pool, pgwatermill.SubscriberConfig{Dispatcher: dispatcher.Config{Logger: quietLogger}})
	require.NoError(t, err)

	subscribed := make(chan error, 1)
	go func() {
		_, err := sub.Subscribe(ctx, "t")
		subscribed <- err
	}()
	wait(ctx, t, accepted) // the start-up checks are waiting for the server
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	for _, ch := range []chan error{subscribed, closed} {
		select {
		case err := <-ch:
			if ch == subscribed {
				require.ErrorIs(t, err, pgwatermill.ErrClosed)
			} else {
				require.NoError(t, err)
			}
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		}
	}
}

// silentServer accepts TCP connections on loopback and never answers,
// like a database host that hangs; reached is closed once it accepted a
// first connection. It closes, with its connections, when the test ends.
// A copy of the core's internal/testdb.SilentServer: a published module
// imports no internal package.
func silentServer(t *testing.T) (addr string, reached <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done, accepted := make(chan struct{}), make(chan struct{})
	noteAccepted := sync.OnceFunc(func() { close(accepted) })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			noteAccepted()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// Subscribe calls racing Close: each either fails with ErrClosed or
// returns a channel that Close closes; Close returns nil once.
func TestSubscribeRacesClose(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{
		Dispatcher: dispatcher.Config{Table: db.Table, Logger: quietLogger},
	})
	require.NoError(t, err)
	const n = 6
	results := make(chan error, n)
	for i := range n {
		go func() {
			ch, err := sub.Subscribe(ctx, fmt.Sprint("t", i))
			if err == nil {
				for range ch { // closed by Close
				}
			}
			results <- err
		}()
	}
	require.NoError(t, sub.Close())
	for range n {
		select {
		case err := <-results:
			if err != nil {
				require.ErrorIs(t, err, pgwatermill.ErrClosed)
			}
		case <-ctx.Done():
			t.Fatal(context.Cause(ctx))
		}
	}
	require.NoError(t, sub.Close())
}
