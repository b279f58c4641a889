package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// insertKeyed commits one event of eventType per key, in the order of keys
// (seq order), with the key as partition key, and returns their IDs.
func insertKeyed(t *testing.T, db *testdb.DB, eventType string, keys []string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(keys))
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err := db.Pool.Exec(context.Background(),
		`INSERT INTO outbox_events (id, event_type, partition_key, payload)
		SELECT id, $3, key, '\x7b7d' FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS x(id, key, n) ORDER BY n`,
		ids, keys, eventType)
	require.NoError(t, err)
	return ids
}

// orderedConfig is baseConfig with per-key ordering.
func orderedConfig(db *testdb.DB, policy dispatcher.HeadPolicy) dispatcher.Config {
	cfg := baseConfig(db)
	cfg.Ordering, cfg.HeadPolicy = dispatcher.PerKey, policy
	return cfg
}

// keyCalls records, per key, the position in its key of each event handed
// out (retries repeat a position).
type keyCalls struct {
	mu    sync.Mutex
	where map[uuid.UUID][2]int // id -> key number, position in key
	calls map[int][]int
}

// newKeyCalls knows keys[i] (a key number) of each ids[i]; positions count
// in the order of ids.
func newKeyCalls(ids []uuid.UUID, keys []int) *keyCalls {
	kc := &keyCalls{where: make(map[uuid.UUID][2]int, len(ids)), calls: make(map[int][]int)}
	next := make(map[int]int)
	for i, id := range ids {
		kc.where[id] = [2]int{keys[i], next[keys[i]]}
		next[keys[i]]++
	}
	return kc
}

func (kc *keyCalls) add(id uuid.UUID) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	w := kc.where[id]
	kc.calls[w[0]] = append(kc.calls[w[0]], w[1])
}

func (kc *keyCalls) of(key int) []int {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return append([]int(nil), kc.calls[key]...)
}

// requireInOrder fails on any key whose positions decrease.
func (kc *keyCalls) requireInOrder(t *testing.T) {
	t.Helper()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for key, pos := range kc.calls {
		for i := 1; i < len(pos); i++ {
			require.LessOrEqual(t, pos[i-1], pos[i], "key %d handed out out of order: %v", key, pos)
		}
	}
}

// A retry in the middle of a key's run stops the run: the rest of the run
// is released without an attempt spent and delivered after the retry, in
// order; another key in the same batch goes on.
func TestOrderedRunStopsOnRetry(t *testing.T) {
	t.Parallel()
	forEachScope(t, func(t *testing.T, scope dispatcher.OrderScope) { orderedRunStopsOnRetry(t, scope) })
}

// forEachScope runs f as a parallel subtest for each order scope: with
// events of one type, both keep the same order.
func forEachScope(t *testing.T, f func(t *testing.T, scope dispatcher.OrderScope)) {
	for _, scope := range []dispatcher.OrderScope{dispatcher.ScopeKey, dispatcher.ScopeKeyAndType} {
		t.Run(scope.String(), func(t *testing.T) {
			t.Parallel()
			f(t, scope)
		})
	}
}

func orderedRunStopsOnRetry(t *testing.T, scope dispatcher.OrderScope) {
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"k", "j", "k", "k", "j", "k", "k", "j"})
	kc := newKeyCalls(ids, []int{0, 1, 0, 0, 1, 0, 0, 1})
	var failed sync.Once
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.OrderScope = scope
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
		kc.add(e.ID)
		var err error
		if e.ID == ids[2] { // k's second event fails once
			failed.Do(func() { err = errors.New("transient") })
		}
		return err
	}))
	runDispatcher(t, d)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	require.Equal(t, []int{0, 1, 1, 2, 3, 4}, kc.of(0), "k: its second event retried, the rest after it")
	require.Equal(t, []int{0, 1, 2}, kc.of(1))
	require.Equal(t, 2, readRow(t, db, ids[2]).Attempts, "a failure and a success")
	for _, id := range []uuid.UUID{ids[3], ids[5], ids[6]} {
		require.Equal(t, 1, readRow(t, db, id).Attempts, "released without an attempt spent: one success")
	}
	require.EqualValues(t, 3, d.Stats().OrderReleased)
}

// Under BlockKey a FAILED event holds the later events of its key back
// (other keys go on) until it is replayed; under SkipFailed they go on.
func TestOrderedFailedHead(t *testing.T) {
	t.Parallel()
	forEachScope(t, orderedFailedHead)
}

func orderedFailedHead(t *testing.T, scope dispatcher.OrderScope) {
	setup := func(t *testing.T, policy dispatcher.HeadPolicy) (*testdb.DB, []uuid.UUID, *keyCalls, *dispatcher.Dispatcher, *sync.Map) {
		db := testdb.NewMigrated(t, testdb.KeyOrder)
		ids := insertKeyed(t, db, "ev", []string{"k", "j", "k", "k", "j"})
		kc := newKeyCalls(ids, []int{0, 1, 0, 0, 1})
		poison := &sync.Map{}
		poison.Store(ids[0], true)
		cfg := orderedConfig(db, policy)
		cfg.OrderScope = scope
		d, err := dispatcher.New(db.NewPool(t, 6), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
			kc.add(e.ID)
			if _, ok := poison.Load(e.ID); ok {
				return outbox.Permanent(errors.New("poison"))
			}
			return nil
		}))
		runDispatcher(t, d)
		return db, ids, kc, d, poison
	}
	t.Run("BlockKey", func(t *testing.T) {
		t.Parallel()
		db, ids, kc, d, poison := setup(t, dispatcher.BlockKey)
		waitFor(t, "k's head FAILED, j SENT", func() bool {
			c := statusCounts(t, db)
			return c[outbox.StatusFailed] == 1 && c[outbox.StatusSent] == 2
		})
		cycles := d.Stats().ClaimCycles
		waitFor(t, "more claims", func() bool { return d.Stats().ClaimCycles >= cycles+5 })
		require.Equal(t, []int{0}, kc.of(0), "k's later events wait behind its FAILED head")
		require.Equal(t, outbox.StatusPending, readRow(t, db, ids[2]).Status)
		require.EqualValues(t, 2, d.Stats().OrderReleased)

		poison.Delete(ids[0])
		a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
		require.NoError(t, err)
		_, err = a.Replay(context.Background(), admin.ReplayParams{IDs: []uuid.UUID{ids[0]}})
		require.NoError(t, err)
		waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
		require.Equal(t, []int{0, 0, 1, 2}, kc.of(0), "the replayed head, then the rest in order")
	})
	t.Run("SkipFailed", func(t *testing.T) {
		t.Parallel()
		db, _, kc, _, _ := setup(t, dispatcher.SkipFailed)
		waitFor(t, "k's head FAILED, the rest SENT", func() bool {
			c := statusCounts(t, db)
			return c[outbox.StatusFailed] == 1 && c[outbox.StatusSent] == 4
		})
		require.Equal(t, []int{0, 1, 2}, kc.of(0))
	})
}

// callPublisher records each Publish call's messages; fail decides a
// message's error.
type callPublisher struct {
	mu    sync.Mutex
	calls [][]uuid.UUID
	fail  func(call int, msgs []outbox.Message, i int) error
	runs  bool // PublishesKeysInOrder
}

func (p *callPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]uuid.UUID, len(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Event.ID
		if p.fail != nil {
			errs[i] = p.fail(len(p.calls), msgs, i)
		}
	}
	p.calls = append(p.calls, ids)
	return errs
}

func (p *callPublisher) PublishesKeysInOrder() bool { return p.runs }

func (p *callPublisher) all() [][]uuid.UUID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]uuid.UUID(nil), p.calls...)
}

// plainPublisher hides PublishesKeysInOrder.
type plainPublisher struct{ p *callPublisher }

func (p plainPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return p.p.Publish(ctx, msgs)
}

// Without a KeyOrderedPublisher a batch is published wave by wave: one
// call per wave, one event of each key in it.
func TestOrderedWavesPublishOneCallEach(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"k", "j", "k", "m", "j", "k"})
	pub := &callPublisher{}
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.Publisher = plainPublisher{pub}
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	want := [][]int{{0, 1, 3}, {2, 4}, {5}}
	got := make([][]int, 0, len(want))
	for _, call := range pub.all() {
		got = append(got, positions(ids, call))
	}
	require.Equal(t, want, got)
}

// A KeyOrderedPublisher gets a key's run of publish-only events in one
// call. A failure in the middle of the run retries that event; the later
// ones it did not attempt are released uncharged and follow it, in order.
func TestOrderedRunsInOneCallWithKeyOrderedPublisher(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"k", "k", "j", "k", "k", "j", "k"})
	pub := &callPublisher{runs: true}
	pub.fail = func(call int, msgs []outbox.Message, i int) error {
		if call > 0 {
			return nil
		}
		for _, m := range msgs[:i] {
			if m.Event.ID == ids[3] && outbox.OrderKey(msgs[i].Event) == "k" {
				return outbox.ErrNotAttempted
			}
		}
		if msgs[i].Event.ID == ids[3] {
			return errors.New("broker hiccup")
		}
		return nil
	}
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.Publisher = pub
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	calls := pub.all()
	require.Len(t, calls, 2)
	require.Equal(t, []int{0, 1, 3, 4, 6, 2, 5}, positions(ids, calls[0]), "every run whole, in one call")
	require.Equal(t, []int{3, 4, 6}, positions(ids, calls[1]), "the retry, then what it held back")
	require.Equal(t, 2, readRow(t, db, ids[3]).Attempts, "a failure and a success")
	require.Equal(t, 1, readRow(t, db, ids[4]).Attempts, "released without an attempt spent: one success")
	require.Equal(t, 1, readRow(t, db, ids[6]).Attempts, "released without an attempt spent: one success")
	require.EqualValues(t, 2, d.Stats().OrderReleased)
}

// Heads retried after more of their successors were released than a
// claim takes: the released successors come first in due order (they
// keep their emit time), and the claim must still reach the heads.
func TestOrderedRetriedHeadsBehindAFullClaim(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"a", "b", "a", "b", "a", "b"})
	kc := newKeyCalls(ids, []int{0, 1, 0, 1, 0, 1})
	failed := &sync.Map{}
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.BatchSize = 4               // a0 b0 a1 b1; then a1 b1 a2 b2 are due before the retried heads
	cfg.Backoff.Initial = time.Hour // the test makes the heads due, both at once
	cfg.Backoff.Max = 2 * time.Hour
	cfg.Claimers = 1 // no second claim's locks make the first skip a1 b1 a2 b2
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
		kc.add(e.ID)
		if _, again := failed.LoadOrStore(e.ID, true); !again && (e.ID == ids[0] || e.ID == ids[1]) {
			return errors.New("transient")
		}
		return nil
	}))
	runDispatcher(t, d)
	waitFor(t, "both heads retried, their successors released", func() bool {
		return d.Stats().Released == 2 && readRow(t, db, ids[0]).Attempts == 1 && readRow(t, db, ids[1]).Attempts == 1
	})
	_, err = db.Pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = now() WHERE id = ANY($1)`,
		[]uuid.UUID{ids[0], ids[1]})
	require.NoError(t, err)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	require.Equal(t, []int{0, 0, 1, 2}, kc.of(0))
	require.Equal(t, []int{0, 0, 1, 2}, kc.of(1))
}

// A stop while a key's first event runs lets it finish and releases the
// later events of the batch, waiting for their wave, unstarted and
// uncharged.
func TestOrderedStopReleasesLaterWaves(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"k", "k", "k"})
	started, finish := make(chan struct{}), make(chan struct{})
	d, err := dispatcher.New(db.NewPool(t, 6), orderedConfig(db, dispatcher.BlockKey))
	require.NoError(t, err)
	require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
		if e.ID == ids[0] {
			close(started)
			<-finish
			return nil
		}
		return errors.New("a later event must not start after the stop")
	}))
	require.NoError(t, d.Start(context.Background()))
	<-started
	stopped := make(chan error, 1)
	go func() {
		stopped <- d.Stop(testctx.New(t))
	}()
	waitFor(t, "the stop to begin", func() bool { return d.Health().State == dispatcher.StateStopping })
	close(finish)
	require.NoError(t, <-stopped)
	require.Equal(t, outbox.StatusSent, readRow(t, db, ids[0]).Status)
	for _, id := range ids[1:] {
		r := readRow(t, db, id)
		require.Equal(t, outbox.StatusPending, r.Status)
		require.Zero(t, r.Attempts)
		require.Zero(t, r.Recoveries)
	}
}
