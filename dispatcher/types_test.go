package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// deliveries records which replica handled each event, and when.
type deliveries struct {
	mu sync.Mutex
	by map[uuid.UUID][]string
	at map[uuid.UUID]time.Time
}

func newDeliveries() *deliveries {
	return &deliveries{by: map[uuid.UUID][]string{}, at: map[uuid.UUID]time.Time{}}
}

// handler returns a handler that records replica as the one that ran.
func (d *deliveries) handler(replica string) outbox.Handler {
	return func(_ context.Context, e outbox.Event) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.by[e.ID] = append(d.by[e.ID], replica)
		if _, ok := d.at[e.ID]; !ok {
			d.at[e.ID] = time.Now()
		}
		return nil
	}
}

func (d *deliveries) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.by)
}

// A rolling deploy: the old replica does not know order.cancelled, the
// new one does. Every event is delivered, none FAILED, and every
// order.cancelled by the new replica, within two of its poll cycles of
// the last commit (the "2 × PollInterval", counted in the cycles
// a loaded machine may stretch); the old one never sees one.
func TestRollingDeployDeadLettersNothing(t *testing.T) {
	t.Parallel()
	const poll = 200 * time.Millisecond
	db := testdb.NewMigrated(t)
	got := newDeliveries()
	var newest atomic.Pointer[dispatcher.Dispatcher]
	pollOf := map[uuid.UUID]uint64{} // the new replica's poll count when it handled an event
	start := func(name string, types ...string) *dispatcher.Dispatcher {
		cfg := baseConfig(db)
		cfg.PollInterval, cfg.Wakeup, cfg.Owner = poll, dispatcher.WakeupDisabled, name
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		for _, typ := range types {
			h := got.handler(name)
			require.NoError(t, d.Handle(typ, func(ctx context.Context, e outbox.Event) error {
				if n := newest.Load(); n != nil && name == "new" {
					got.mu.Lock()
					pollOf[e.ID] = n.Stats().PollCycles
					got.mu.Unlock()
				}
				return h(ctx, e)
			}))
		}
		if name == "new" {
			newest.Store(d)
		}
		runDispatcher(t, d)
		return d
	}
	old := start("old", "order.created", "order.paid")
	updated := start("new", "order.created", "order.paid", "order.cancelled")
	types, all := old.ClaimedTypes()
	require.False(t, all)
	require.Equal(t, []string{"order.created", "order.paid"}, types)
	waitFor(t, "both replicas claiming", func() bool {
		return old.Stats().ClaimCycles > 0 && updated.Stats().ClaimCycles > 0
	})

	emitted := time.Now()
	var ids, cancelled []uuid.UUID
	for range 8 {
		ids = append(ids, insertEvents(t, db, "order.created", 2)...)
		c := insertEvents(t, db, "order.cancelled", 2)
		cancelled = append(cancelled, c...)
		ids = append(ids, c...)
		ids = append(ids, insertEvents(t, db, "order.paid", 1)...)
	}
	require.Len(t, ids, 40)
	committed := updated.Stats().PollCycles
	waitFor(t, "all 40 events delivered", func() bool { return statusCounts(t, db)[outbox.StatusSent] == 40 })

	require.Equal(t, map[outbox.Status]int{outbox.StatusSent: 40}, statusCounts(t, db), "0 FAILED, 0 left")
	require.Equal(t, 40, got.count())
	got.mu.Lock()
	defer got.mu.Unlock()
	var slowest time.Duration
	for _, id := range cancelled {
		require.Equal(t, []string{"new"}, got.by[id], "order.cancelled %s", id)
		slowest = max(slowest, got.at[id].Sub(emitted))
		require.LessOrEqual(t, pollOf[id], committed+2, "order.cancelled %s handled later than two poll cycles after the last commit", id)
	}
	t.Logf("the slowest order.cancelled was handled %s after the emits began (PollInterval %s, polling only)", slowest, poll)
	require.Zero(t, old.Stats().Failed+updated.Stats().Failed)
}

// An event no running dispatcher claims waits PENDING, visibly: counted
// in Stats by type once it has been due for a minute, logged at WARN once
// (not at every count), never attempted.
func TestUnhandledTypeWaitsVisibly(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	logs := &logRecorder{}
	cfg := baseConfig(db)
	cfg.RecoverEvery, cfg.Logger = 1, slog.New(logs)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	handled := newDeliveries()
	require.NoError(t, d.Handle("known", handled.handler("d")))
	ghosts := insertEvents(t, db, "ghost", 3)
	insertEvents(t, db, "ghost.new", 1) // due for less than a minute: not counted yet
	_, err = db.Pool.Exec(t.Context(), `UPDATE outbox_events SET next_attempt_at = now() - interval '2 minutes' WHERE id = ANY($1)`, ghosts)
	require.NoError(t, err)
	known := insertEvents(t, db, "known", 2)
	runDispatcher(t, d)

	waitFor(t, "the ghosts counted", func() bool { return d.Stats().WaitingUnhandled == 3 })
	s := d.Stats()
	require.Equal(t, map[string]int64{"ghost": 3}, s.WaitingUnhandledByType)
	first := s.PollCycles
	waitFor(t, "five more counts", func() bool { return d.Stats().PollCycles >= first+5 })
	require.Equal(t, 1, logs.count(slog.LevelWarn, "type", "ghost"), "one WARN per type in five minutes")
	waitFor(t, "the known events delivered", func() bool { return handled.count() == 2 })

	for _, id := range ghosts {
		r := readRow(t, db, id)
		require.Equal(t, row{Status: outbox.StatusPending}, r, "never attempted, never FAILED")
	}
	require.Equal(t, outbox.StatusSent, readRow(t, db, known[0]).Status)
	require.Zero(t, d.Stats().Failed)
}

// Recovery takes back the expired leases of every type: a crashed
// replica's lease on an event this dispatcher does not claim returns to
// PENDING here, and the replica that claims its type delivers it.
func TestRecoveryTakesBackLeasesOfEveryType(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	lost := insertEvents(t, db, "y", 1)[0]
	_, err := db.Pool.Exec(t.Context(), `UPDATE outbox_events SET status = 'PROCESSING', lock_token = gen_random_uuid(),
		lease_until = now() - interval '1 second', started_at = now() - interval '1 minute' WHERE id = $1`, lost)
	require.NoError(t, err)

	cfg := baseConfig(db)
	cfg.RecoverEvery = 1
	other, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, other.Handle("z", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, other)
	waitFor(t, "the lease recovered", func() bool { return other.Stats().Recovered == 1 })
	r := readRow(t, db, lost)
	require.Equal(t, outbox.StatusPending, r.Status, "not claimed by a dispatcher that does not handle y")
	require.Equal(t, 1, r.Recoveries)
	require.Zero(t, other.Stats().Claimed)

	got := newDeliveries()
	owner, err := dispatcher.New(db.NewPool(t, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, owner.Handle("y", got.handler("owner")))
	runDispatcher(t, owner)
	waitFor(t, "y delivered", func() bool { return readRow(t, db, lost).Status == outbox.StatusSent })
}

// With PublishTypes a publishing dispatcher claims and publishes those
// types (and handles its own), and leaves the rest; without them, or with
// a DefaultHandler, it claims every type.
func TestPublishTypes(t *testing.T) {
	t.Parallel()

	t.Run("claims and publishes only its types", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		pub := &recordingPublisher{}
		cfg := baseConfig(db)
		cfg.Publisher, cfg.PublishTypes = pub, []string{"p"}
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		got := newDeliveries()
		require.NoError(t, d.Handle("h", got.handler("d")))
		types, all := d.ClaimedTypes()
		require.False(t, all)
		require.Equal(t, []string{"h", "p"}, types)
		p := insertEvents(t, db, "p", 1)[0]
		h := insertEvents(t, db, "h", 1)[0]
		other := insertEvents(t, db, "other", 1)[0]
		runDispatcher(t, d)
		waitFor(t, "p and h sent", func() bool {
			return readRow(t, db, p).Status == outbox.StatusSent && readRow(t, db, h).Status == outbox.StatusSent
		})
		msgs := pub.published()
		require.Len(t, msgs, 1, "h is handled, not published")
		require.Equal(t, p, msgs[0].Event.ID)
		require.Equal(t, "p", msgs[0].Destination)
		require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, other))
	})

	t.Run("catch-alls claim every type", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		for name, cfg := range map[string]dispatcher.Config{
			"publisher without PublishTypes": {Publisher: &recordingPublisher{}},
			"default handler":                {DefaultHandler: func(context.Context, outbox.Event) error { return nil }},
		} {
			cfg.Table = db.Table()
			d, err := dispatcher.New(db.Pool, cfg)
			require.NoError(t, err, name)
			require.NoError(t, d.Handle("h", func(context.Context, outbox.Event) error { return nil }))
			types, all := d.ClaimedTypes()
			require.True(t, all, name)
			require.Empty(t, types, name)
		}
	})

	t.Run("invalid types are refused", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		for name, cfg := range map[string]dispatcher.Config{
			"without a publisher": {PublishTypes: []string{"p"}},
			"blank":               {Publisher: &recordingPublisher{}, PublishTypes: []string{"p", " "}},
			"NUL":                 {Publisher: &recordingPublisher{}, PublishTypes: []string{"p\x00"}},
		} {
			_, err := dispatcher.New(db.Pool, cfg)
			var ce *outbox.ConfigError
			require.True(t, errors.As(err, &ce), "%s: %v", name, err)
			require.Equal(t, "PublishTypes", ce.Field, name)
		}
		d, err := dispatcher.New(db.Pool, dispatcher.Config{})
		require.NoError(t, err)
		err = d.Handle("bad\xff", func(context.Context, outbox.Event) error { return nil })
		var ie *outbox.InputError
		require.True(t, errors.As(err, &ie), "%v", err)
		require.Equal(t, "eventType", ie.Field)
	})
}
