package read_test

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/relay/ticker"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// fakePub records what it publishes; park says which keys it refuses
// for good; block, when set, makes a call wait for its ctx's end.
type fakePub struct {
	mu        sync.Mutex
	published []batch.Event
	calls     []call
	park      map[string]bool
	parkErr   string // the text of a refusal; "refused" when empty
	block     bool
	hold      chan struct{} // when set, a call waits for it to close (or its ctx's end), then publishes
	blocked   chan struct{} // a call began blocking
	onPublish func(events []batch.Event)
	got       chan int // the events published by each call
}

type call struct {
	events []batch.Event
	parked map[string]bool
}

func newFake() *fakePub {
	return &fakePub{park: map[string]bool{}, blocked: make(chan struct{}, 100), got: make(chan int, 10000)}
}

func (f *fakePub) Publish(ctx context.Context, events []batch.Event, parked map[string]bool) (read.Result, error) {
	f.mu.Lock()
	block, hook, hold := f.block, f.onPublish, f.hold
	f.calls = append(f.calls, call{events: events, parked: clone(parked)})
	f.mu.Unlock()
	if hook != nil {
		hook(events)
	}
	if block {
		f.blocked <- struct{}{}
		<-ctx.Done()
		return read.Result{}, context.Cause(ctx)
	}
	if hold != nil {
		f.blocked <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return read.Result{}, context.Cause(ctx)
		}
	}
	var res read.Result
	newKeys := map[string]bool{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range events {
		k := e.Key()
		switch {
		case parked[k] || newKeys[k]:
			res.Parked = append(res.Parked, batch.Parked{Event: e, Key: k, Code: "key_parked"})
		case f.park[k]:
			newKeys[k] = true
			res.NewKeys = append(res.NewKeys, k)
			res.Parked = append(res.Parked, batch.Parked{Event: e, Key: k, Code: "permanent", Err: cmpOr(f.parkErr, "refused")})
		default:
			f.published = append(f.published, e)
			res.Published++
		}
	}
	f.got <- len(events)
	return res, nil
}

func clone(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (f *fakePub) snapshot() []batch.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]batch.Event(nil), f.published...)
}

// env is a migrated log with a running ticker and a group "g".
type env struct {
	db    *testdb.DB
	table outbox.Table
	store *store.Store
	wake  chan struct{}
}

func newEnv(t *testing.T) env {
	t.Helper()
	db, table := relaytest.NewLog(t)
	s, err := store.New(db.Pool, table)
	require.NoError(t, err)
	require.NoError(t, s.CreateGroup(t.Context(), "g", store.Latest))
	e := env{db: db, table: table, store: s, wake: make(chan struct{}, 1)}
	tk := ticker.New(ticker.Config{Store: s, Owner: "t", Interval: time.Millisecond, Idle: time.Hour, Lease: time.Minute,
		OnTick: func(int64) {
			select {
			case e.wake <- struct{}{}:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tk.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// runReader runs a reader of "g" until the test ends or stop is called;
// its result comes on the returned channel.
func (e env) runReader(t *testing.T, pub read.Publisher, cfg read.Config) (stop func(), result chan error) {
	t.Helper()
	cfg.Store, cfg.Lanes, cfg.Group = e.store, pub, "g"
	cfg.Owner = cmpOr(cfg.Owner, "r")
	cfg.Wake = e.wake
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Hour) // by default the ticker's wake is the only signal
	r := read.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	result = make(chan error, 1)
	go func() { result <- r.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, result
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// waitPublished waits until pub published n events in all.
func waitPublished(t *testing.T, pub *fakePub, n int) {
	t.Helper()
	for len(pub.snapshot()) < n {
		select {
		case <-pub.got:
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
}

func TestReaderDeliversEachCommittedEventOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	t.Run("read ahead", func(t *testing.T) { t.Parallel(); testDelivery(t, false) })
	t.Run("one batch at a time", func(t *testing.T) { t.Parallel(); testDelivery(t, true) })
}

// testDelivery: writers of five keys commit and roll back at random
// moments; the reader publishes every committed event once, each key's
// in order, and the cursor does not move while a batch publishes.
func testDelivery(t *testing.T, noReadAhead bool) {
	e := newEnv(t)
	pub := newFake()
	type pos struct{ last, batchTick int64 }
	var seenPos []pos
	pub.onPublish = func([]batch.Event) { // the cursor has not moved while a batch publishes
		var p pos
		err := e.db.Pool.QueryRow(context.Background(), `SELECT last_tick, batch_tick FROM `+relaytest.LogName+`_cursors`).
			Scan(&p.last, &p.batchTick)
		if err == nil {
			seenPos = append(seenPos, p)
		}
	}
	var stats []read.BatchStats
	var statsMu sync.Mutex
	e.runReader(t, pub, read.Config{MaxBatch: 7, NoReadAhead: noReadAhead, OnBatch: func(s read.BatchStats) {
		statsMu.Lock()
		stats = append(stats, s)
		statsMu.Unlock()
	}})

	const keys, perKey = 5, 20
	pool := e.db.NewPool(t, keys+1)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perKey {
				tx, err := pool.Begin(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				_, err = tx.Exec(t.Context(), `INSERT INTO `+relaytest.LogName+` (id, event_type, partition_key, payload)
					VALUES (gen_random_uuid(), 'test', $1, $2::bytea)`, fmt.Sprint("k", k), []byte(strconv.Itoa(i)))
				if err != nil {
					t.Error(err)
					return
				}
				if i%7 == 3 {
					_ = tx.Rollback(t.Context()) // never delivered; the key's count goes on
					continue
				}
				if err := tx.Commit(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := 0
	for i := range perKey {
		if i%7 != 3 {
			want++
		}
	}
	waitPublished(t, pub, keys*want)

	events := pub.snapshot()
	require.Len(t, events, keys*want, "every committed event once")
	last := map[string]int{}
	ids := map[uuid.UUID]bool{}
	for _, ev := range events {
		require.False(t, ids[ev.Event.ID], "published twice")
		ids[ev.Event.ID] = true
		n, err := strconv.Atoi(string(ev.Event.Payload))
		require.NoError(t, err)
		require.NotEqual(t, 3, n%7, "a rolled-back event")
		prev, ok := last[ev.Key()]
		require.True(t, !ok || n > prev, "key %s: %d after %d", ev.Key(), n, prev)
		last[ev.Key()] = n
	}
	statsMu.Lock()
	defer statsMu.Unlock()
	for i, p := range seenPos[:len(stats)] {
		require.Equal(t, stats[i].From, p.last, "batch %d: the cursor moved before the batch was done", i)
		require.Equal(t, stats[i].To, p.batchTick, "batch %d: the open batch is recorded", i)
	}
}

func TestReaderParksAndLoadsParkedKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	pub.park["bad"] = true
	moved := make(chan read.BatchStats, 100)
	stop, res := e.runReader(t, pub, read.Config{OnBatch: func(s read.BatchStats) { moved <- s }})
	relaytest.Emit(t, e.db.Pool, "bad", 2)
	relaytest.Emit(t, e.db.Pool, "good", 1)
	for parked := 0; parked < 2; { // the moves that park commit after the publish returned
		parked += (<-moved).Parked
	}
	keys, err := e.store.ParkedKeys(t.Context(), "g")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"bad": true}, keys)
	var parked int
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+relaytest.LogName+`_parked`).Scan(&parked))
	require.Equal(t, 2, parked)
	stop()
	require.NoError(t, <-res) // released

	// A new reader loads the parked keys at take and passes them on.
	pub2 := newFake()
	e.runReader(t, pub2, read.Config{Owner: "r2"})
	relaytest.Emit(t, e.db.Pool, "bad", 1)
	relaytest.Emit(t, e.db.Pool, "good", 1)
	waitPublished(t, pub2, 1)
	pub2.mu.Lock()
	defer pub2.mu.Unlock()
	require.True(t, pub2.calls[0].parked["bad"])
	require.Equal(t, "good", pub2.published[0].Key())
}

func TestReaderLeaseLostStopsPublishing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	pub.block = true
	errs := make(chan error, 100)
	e.runReader(t, pub, read.Config{Lease: 300 * time.Millisecond, OnError: func(err error) { errs <- err }})
	relaytest.Emit(t, e.db.Pool, "k", 3)
	<-pub.blocked

	// Another reader takes the group (the lease lapsed, say): the blocked
	// publish is cancelled and the cursor stays.
	var before int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `UPDATE `+relaytest.LogName+`_cursors
		SET token = gen_random_uuid(), lease_until = now() + interval '1 hour' RETURNING last_tick`).Scan(&before))
	err := <-errs
	require.ErrorIs(t, err, store.ErrLeaseLost)

	pub.mu.Lock()
	pub.block = false
	pub.mu.Unlock()
	var after int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `UPDATE `+relaytest.LogName+`_cursors
		SET token = NULL, lease_until = NULL RETURNING last_tick`).Scan(&after))
	require.Equal(t, before, after, "no move without the lease")
	waitPublished(t, pub, 3) // published again once the lease is back
}

func TestReaderStopsWhenSnapshotsGoBackwards(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	// The next tick's snapshot is rewritten before the reader sees it.
	_, err := e.db.Pool.Exec(t.Context(), `CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.snapshot := '1:1:'::pg_snapshot; RETURN NEW; END $$;
		CREATE TRIGGER rewrite BEFORE INSERT ON `+relaytest.LogName+`_ticks FOR EACH ROW EXECUTE FUNCTION rewrite()`)
	require.NoError(t, err)
	_, result := e.runReader(t, pub, read.Config{})
	relaytest.Emit(t, e.db.Pool, "k", 1)
	err = <-result
	var stop *read.StopError
	require.ErrorAs(t, err, &stop)
	require.ErrorIs(t, err, store.ErrSnapshotBackwards)
	require.Empty(t, pub.snapshot(), "nothing published")
	var reason *string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT stopped_reason FROM `+relaytest.LogName+`_cursors`).Scan(&reason))
	require.NotNil(t, reason)

	_, result = e.runReader(t, newFake(), read.Config{Owner: "r2"})
	err = <-result
	require.ErrorAs(t, err, &stop, "a stopped group stays stopped")
	require.ErrorIs(t, err, store.ErrGroupStopped)
}

func TestTwoReadersOneGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	stopA, resA := e.runReader(t, pub, read.Config{Owner: "a", Lease: 3 * time.Second})
	relaytest.Emit(t, e.db.Pool, "k", 1)
	waitPublished(t, pub, 1) // a holds the group
	_, _ = e.runReader(t, pub, read.Config{Owner: "b", Lease: 3 * time.Second})
	relaytest.Emit(t, e.db.Pool, "k", 1)
	waitPublished(t, pub, 2)
	stopA()
	require.NoError(t, <-resA)
	relaytest.Emit(t, e.db.Pool, "k", 1)
	waitPublished(t, pub, 3) // b took over
	require.Len(t, pub.snapshot(), 3, "nothing twice")
	var owner string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT owner FROM `+relaytest.LogName+`_cursors`).Scan(&owner))
	require.Equal(t, "b", owner)
}
