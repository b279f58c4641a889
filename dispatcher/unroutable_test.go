package dispatcher_test

import (
	"log/slog"

	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// routeOnly returns a RouteFunc that routes the given types to a
// destination named after them, and gives every other type none.
func routeOnly(types ...string) func(outbox.Event) string {
	known := map[string]bool{}
	for _, t := range types {
		known[t] = true
	}
	return func(e outbox.Event) string {
		if known[e.Type] {
			return e.Type
		}
		return ""
	}
}

// A rolling deploy with publishers: two replicas on one table, each a
// Publisher without PublishTypes (so each claims every type), the old one
// (A) routing only the old type, the new one (B) the new type too. While
// the new type is emitted continuously, A claims some of its events and
// can route none of them: it releases them, unstarted and uncharged, and
// B delivers every one. Nothing is FAILED; A's Stats and WARN report the
// type it could not route.
func TestRollingDeployWithPublishers(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	logsA := &logRecorder{}
	start := func(name string, logs *logRecorder, route func(outbox.Event) string) (*dispatcher.Dispatcher, *recordingPublisher) {
		pub := &recordingPublisher{}
		cfg := baseConfig(db)
		cfg.Owner, cfg.Publisher, cfg.RouteFunc = name, pub, route
		if logs != nil {
			cfg.Logger = slog.New(logs)
		}
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		return d, pub
	}
	a, pubA := start("A", logsA, routeOnly("order.created"))
	b, pubB := start("B", nil, routeOnly("order.created", "notification.requested"))
	waitFor(t, "both replicas claiming", func() bool {
		return a.Stats().ClaimCycles > 0 && b.Stats().ClaimCycles > 0
	})

	var created, notified []uuid.UUID
	for range 30 { // emitted while both run, a few poll cycles apart
		created = append(created, insertEvents(t, db, "order.created", 1)...)
		notified = append(notified, insertEvents(t, db, "notification.requested", 1)...)
		time.Sleep(5 * time.Millisecond)
	}
	total := len(created) + len(notified)
	waitFor(t, "every event SENT or one FAILED", func() bool {
		c := statusCounts(t, db)
		return c[outbox.StatusSent] == total || c[outbox.StatusFailed] > 0
	})
	require.Equal(t, map[outbox.Status]int{outbox.StatusSent: total}, statusCounts(t, db), "0 FAILED, 0 left")

	byA := map[uuid.UUID]bool{}
	for _, m := range pubA.published() {
		byA[m.Event.ID] = true
	}
	byB := map[uuid.UUID]bool{}
	for _, m := range pubB.published() {
		byB[m.Event.ID] = true
	}
	for _, id := range notified {
		require.True(t, byB[id], "notification.requested %s delivered by B", id)
		require.False(t, byA[id], "notification.requested %s published by A, which has no route for it", id)
		r := readRow(t, db, id)
		require.Equal(t, 1, r.Attempts, "only B's delivery counts an attempt")
		require.Zero(t, r.Recoveries)
	}
	require.Zero(t, a.Stats().Failed+b.Stats().Failed)
	s := a.Stats()
	require.Positive(t, s.Unroutable, "A claimed some of the new type (a catch-all) and released them")
	require.Equal(t, map[string]uint64{"notification.requested": s.Unroutable}, s.UnroutableByType)
	require.Zero(t, b.Stats().Unroutable)
	require.Equal(t, 1, logsA.count(slog.LevelWarn, "type", "notification.requested"), "one WARN per type")
}

// An event a dispatcher claims and cannot route is released unstarted and
// uncharged, whatever claimed it: a Publisher without PublishTypes, one
// whose PublishTypes list the type, a KeyOrderedPublisher. Its attempts
// and recoveries stay as they were, no start mark or lease is left, it is
// never published, and it is PENDING again, due after a short back-off.
func TestUnroutableReleaseIsUncharged(t *testing.T) {
	t.Parallel()
	for name, configure := range map[string]func(*dispatcher.Config){
		"publisher without PublishTypes": func(c *dispatcher.Config) { c.Publisher = &recordingPublisher{} },
		"PublishTypes list it":           func(c *dispatcher.Config) { c.Publisher, c.PublishTypes = &recordingPublisher{}, []string{"x"} },
		"key-ordered publisher":          func(c *dispatcher.Config) { c.Publisher = &callPublisher{runs: true} },
		"per-key ordering": func(c *dispatcher.Config) {
			c.Publisher, c.Ordering = &callPublisher{runs: true}, dispatcher.PerKey
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t, testdb.KeyOrder)
			ids := insertEvents(t, db, "x", 2)
			// ids[1] was tried twice and recovered once: a suspect, which no claim marks.
			_, err := db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 2, recoveries = 1 WHERE id = $1`, ids[1])
			require.NoError(t, err)
			cfg := baseConfig(db)
			configure(&cfg)
			cfg.RouteFunc = func(outbox.Event) string { return "" }
			d, err := dispatcher.New(db.NewPool(t, 4), cfg)
			require.NoError(t, err)
			require.NoError(t, d.Start(t.Context()))
			waitFor(t, "both released", func() bool { return d.Stats().Released >= 2 })
			require.NoError(t, d.Stop(t.Context()))

			s := d.Stats()
			require.GreaterOrEqual(t, s.Unroutable, uint64(2))
			require.Equal(t, map[string]uint64{"x": s.Unroutable}, s.UnroutableByType)
			require.Zero(t, s.Failed+s.Sent+s.Retried+s.Recovered)
			for i, want := range []row{{Status: outbox.StatusPending}, {Status: outbox.StatusPending, Attempts: 2, Recoveries: 1}} {
				require.Equal(t, want, readRow(t, db, ids[i]), "event %d: uncharged", i)
				var marked, leased, logged, later bool
				require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT started_at IS NOT NULL, lock_token IS NOT NULL OR lease_until IS NOT NULL,
					jsonb_array_length(attempt_log) > 0, next_attempt_at > created_at FROM outbox_events WHERE id = $1`, ids[i]).
					Scan(&marked, &leased, &logged, &later))
				require.Equal(t, []bool{false, false, false, true}, []bool{marked, leased, logged, later},
					"event %d: no start mark, no lease, no attempt logged, due again later", i)
			}
			switch p := cfg.Publisher.(type) {
			case *recordingPublisher:
				require.Empty(t, p.published())
			case *callPublisher:
				require.Empty(t, p.all())
			}
		})
	}
}

// Under per-key ordering an unroutable head holds its key, as an
// unhandled one does: the rest of the key's run is released uncharged and
// waits, other keys go on; a replica that routes the head's type then
// delivers the key in order.
func TestUnroutableHeadHoldsItsKey(t *testing.T) {
	t.Parallel()
	for name, runs := range map[string]bool{"wave by wave": false, "key-ordered runs": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t, testdb.KeyOrder)
			head := insertKeyed(t, db, "new", []string{"k"})[0]
			rest := insertKeyed(t, db, "ev", []string{"k", "j", "k", "j"})
			k := []uuid.UUID{head, rest[0], rest[2]}
			start := func(route func(outbox.Event) string) (*dispatcher.Dispatcher, *callPublisher) {
				pub := &callPublisher{runs: runs}
				cfg := orderedConfig(db, dispatcher.BlockKey)
				cfg.Publisher, cfg.RouteFunc = pub, route
				d, err := dispatcher.New(db.NewPool(t, 4), cfg)
				require.NoError(t, err)
				runDispatcher(t, d)
				return d, pub
			}
			old, oldPub := start(routeOnly("ev"))
			waitFor(t, "j delivered and k's head released", func() bool {
				return readRow(t, db, rest[1]).Status == outbox.StatusSent && readRow(t, db, rest[3]).Status == outbox.StatusSent &&
					old.Stats().Unroutable >= 1 && old.Stats().OrderReleased >= 2
			})
			require.NoError(t, old.Stop(t.Context()))
			for _, id := range k {
				require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id), "k's events uncharged")
			}
			for _, call := range oldPub.all() {
				for _, id := range call {
					require.NotContains(t, k, id, "the old replica published none of k")
				}
			}
			require.Zero(t, old.Stats().Failed)

			_, newPub := start(routeOnly("new", "ev"))
			waitFor(t, "k delivered", func() bool { return statusCounts(t, db)[outbox.StatusSent] == 5 })
			var order []uuid.UUID
			for _, call := range newPub.all() {
				order = append(order, call...)
			}
			require.Equal(t, k, order, "k in order, by the new replica")
		})
	}
}
