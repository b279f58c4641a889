package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/relay"
)

// recording is a publisher that acks every message and records it.
type recording struct {
	mu   sync.Mutex
	msgs []outbox.Message
	seen map[uuid.UUID]int
}

func (p *recording) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[uuid.UUID]int{}
	}
	for _, m := range msgs {
		p.msgs = append(p.msgs, m)
		p.seen[m.Event.ID]++
	}
	return make([]error, len(msgs))
}

func (p *recording) distinct() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

// TestRelayEndToEnd emits events of several keys through the emitter
// into a log, in transactions committed one after another and some
// rolled back, and checks that a relay publishes every committed event
// once, none rolled back, each key's events in emit order, and moves its
// cursor to the end.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db, log := relaytest.NewLog(t)
	pool := db.NewPool(t, 8)
	require.NoError(t, relay.CreateGroup(ctx, pool, log, "g", relay.Latest))

	pub := &recording{}
	r, err := relay.New(relay.Config{Pool: pool, Log: log, Group: "g", Owner: "e2e", Publisher: pub,
		TickInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	em, err := emitter.New(emitter.Config{Table: log, Kind: outbox.KindLog})
	require.NoError(t, err)
	const keys, perKey = 5, 40
	var committed []outbox.Event
	for i := range perKey {
		for k := range keys {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			e := outbox.Event{Type: "test.e2e", PartitionKey: fmt.Sprintf("k%d", k), Payload: []byte(fmt.Sprint(i))}
			e.ID = uuid.Must(uuid.NewV7())
			_, err = em.Emit(ctx, tx, e)
			require.NoError(t, err)
			if i%7 == 3 && k == 0 {
				require.NoError(t, tx.Rollback(ctx))
				continue
			}
			require.NoError(t, tx.Commit(ctx))
			committed = append(committed, e)
		}
	}
	testctx.Await(t, "every committed event published", func() bool { return pub.distinct() >= len(committed) })
	require.NoError(t, r.Stop(ctx))

	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Len(t, pub.seen, len(committed), "nothing rolled back published")
	for _, e := range committed {
		require.Equal(t, 1, pub.seen[e.ID], "published once: %s", e.ID)
	}
	last := map[string]string{}
	for _, m := range pub.msgs {
		k := m.Event.PartitionKey
		require.Less(t, last[k], m.Event.ID.String(), "key %s in emit order", k)
		last[k] = m.Event.ID.String()
	}
	st := r.Stats()
	require.EqualValues(t, len(committed), st.Published)
}

// TestStartRefusesALogWithoutHeadroom drops every part of a log: a relay
// without a ticker refuses to start (nothing would add parts), through
// Verify or, without it, the head-room check; one with a ticker adds them
// and starts.
func TestStartRefusesALogWithoutHeadroom(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db, log := relaytest.NewLog(t)
	pool := db.NewPool(t, 4)
	require.NoError(t, relay.CreateGroup(ctx, pool, log, "g", relay.Latest))
	_, err := pool.Exec(ctx, `DO $$ DECLARE p regclass; BEGIN
		FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = '`+log.Schema+`.`+log.Name+`'::regclass LOOP
			EXECUTE format('DROP TABLE %s', p);
		END LOOP; END $$`)
	require.NoError(t, err)
	cfg := relay.Config{Pool: pool, Log: log, Group: "g", Publisher: &recording{}, NoTicker: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r, err := relay.New(cfg)
	require.NoError(t, err)
	require.ErrorContains(t, r.Start(ctx), "no partition for new transactions", "Verify names it")
	cfg.SkipVerify = true
	r, err = relay.New(cfg)
	require.NoError(t, err)
	require.ErrorIs(t, r.Start(ctx), relay.ErrNoHeadroom)

	cfg.NoTicker, cfg.SkipVerify = false, false
	r, err = relay.New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))
}

// refusing acks every message but refuses, for good, events of type
// "bad" until accept is set.
type refusing struct {
	recording
	accept atomic.Bool
}

func (p *refusing) Publish(ctx context.Context, msgs []outbox.Message) []error {
	var ok []outbox.Message
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.Event.Type == "bad" && !p.accept.Load() {
			errs[i] = outbox.Permanent(errors.New("refused"))
			continue
		}
		ok = append(ok, m)
	}
	p.recording.Publish(ctx, ok)
	return errs
}

// TestKeylessEventsParkAloneAndReplay: an event without a key that the
// broker refuses for good is parked alone (the keyless events after it
// flow), under the empty key, which an operator replays like any other.
func TestKeylessEventsParkAloneAndReplay(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db, log := relaytest.NewLog(t)
	pool := db.NewPool(t, 8)
	require.NoError(t, relay.CreateGroup(ctx, pool, log, "g", relay.Latest))
	pub := &refusing{}
	r, err := relay.New(relay.Config{Pool: pool, Log: log, Group: "g", Owner: "e2e", Publisher: pub,
		TickInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	em, err := emitter.New(emitter.Config{Table: log, Kind: outbox.KindLog})
	require.NoError(t, err)
	emit := func(typ string) uuid.UUID {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		ids, err := em.Emit(ctx, tx, outbox.Event{Type: typ, Payload: []byte("{}")})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return ids[0]
	}
	bad := emit("bad")
	good := emit("good")
	testctx.Await(t, "the keyless event after the refused one", func() bool { return pub.distinct() == 1 })
	ops, err := admin.NewRelay(pool, admin.RelayConfig{Log: log})
	require.NoError(t, err)
	var keys []admin.ParkedKey
	testctx.Await(t, "the refused event parked", func() bool {
		keys, err = ops.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{})
		return err == nil && len(keys) > 0
	})
	require.Len(t, keys, 1)
	require.Equal(t, "", keys[0].Key, "parked under the empty key")
	require.EqualValues(t, 1, keys[0].Events)
	parked, err := ops.ParkedEvents(ctx, "g", admin.ParkedEventsQuery{NoKey: true})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, bad, parked[0].ID)
	pub.mu.Lock()
	require.Equal(t, 1, pub.seen[good])
	pub.mu.Unlock()

	pub.accept.Store(true)
	require.NoError(t, ops.RequestReplay(ctx, "g", ""))
	testctx.Await(t, "the replayed event", func() bool { return pub.distinct() == 2 })
	pub.mu.Lock()
	require.Equal(t, 1, pub.seen[bad])
	pub.mu.Unlock()
	testctx.Await(t, "no parked key left", func() bool {
		keys, err := ops.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{})
		return err == nil && len(keys) == 0
	})
}
