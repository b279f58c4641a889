package dispatcher_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// replica is a dispatcher of db with its own owner, mode and logs.
func replica(t *testing.T, db *testdb.DB, owner string, ordering dispatcher.Ordering, wakeup dispatcher.Wakeup,
	lease time.Duration, mp *telemetrytest.MeterProvider) (*dispatcher.Dispatcher, *logRecorder) {
	t.Helper()
	logs := &logRecorder{}
	cfg := baseConfig(db)
	cfg.Owner, cfg.Ordering, cfg.Wakeup, cfg.LeaseDuration, cfg.Logger = owner, ordering, wakeup, lease, slog.New(logs)
	if mp != nil {
		cfg.MeterProvider = mp
	}
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	return d, logs
}

// conflictWith returns the conflict d reports with owner, if any.
func conflictWith(d *dispatcher.Dispatcher, owner string) (dispatcher.ModeConflict, bool) {
	for _, c := range d.Health().ModeConflicts {
		if c.Owner == owner {
			return c, true
		}
	}
	return dispatcher.ModeConflict{}, false
}

// Two replicas of one table, one PerKey and one Unordered: each logs a
// WARN naming the other's owner and mode and reports it in Health and
// Stats, and stays healthy. The hello interval is 20 minutes (a third of
// a 1h lease), so they find each other without waiting for one: the
// hello each says once it listens, and the answer it gets.
func TestModeConflictReportedByBoth(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	mp := &telemetrytest.MeterProvider{}
	a, logsA := replica(t, db, "replica-a", dispatcher.PerKey, dispatcher.WakeupRequired, time.Hour, mp)
	b, logsB := replica(t, db, "replica-b", dispatcher.Unordered, dispatcher.WakeupRequired, time.Hour, nil)
	waitFor(t, "both report the conflict", func() bool {
		_, okA := conflictWith(a, "replica-b")
		_, okB := conflictWith(b, "replica-a")
		return okA && okB
	})
	cA, _ := conflictWith(a, "replica-b")
	require.Equal(t, "unordered", cA.Ordering)
	cB, _ := conflictWith(b, "replica-a")
	require.Equal(t, []string{"per-key", "block-key", "key"}, []string{cB.Ordering, cB.HeadPolicy, cB.OrderScope})
	require.Equal(t, 1, logsA.count(slog.LevelWarn, "other_owner", "replica-b"))
	require.Equal(t, 1, logsB.count(slog.LevelWarn, "other_owner", "replica-a"))
	require.Equal(t, 1, logsB.count(slog.LevelWarn, "other_ordering", "per-key"))
	require.Equal(t, 1, a.Stats().ModeConflicts)
	require.Equal(t, 1, b.Stats().ModeConflicts)
	require.NoError(t, a.Health().Healthy(time.Minute), "a conflict does not make a replica unhealthy")
	require.Equal(t, 1, logsA.count(slog.LevelInfo, "ordering", "per-key"), "the start log shows the mode")
	require.Equal(t, 1, logsA.count(slog.LevelInfo, "order_scope", "key"))
	require.NoError(t, mp.Collect(context.Background()))
	require.Equal(t, []float64{1}, values(mp.Points("pgoutbox.mode_conflicts")), "the gauge")
}

// A replica without a listener (WakeupDisabled) still says hello every
// third of its LeaseDuration: one that listens, started after it (so
// that it missed its first hello), reports it from those hellos, and
// forgets it within three intervals once it stopped. The replica without
// a listener hears nothing and reports nothing.
func TestModeConflictFromReplicaWithoutListener(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	cfg := baseConfig(db)
	cfg.Owner, cfg.Wakeup, cfg.LeaseDuration = "replica-b", dispatcher.WakeupDisabled, 1500*time.Millisecond
	b, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, b.Start(t.Context()))
	a, _ := replica(t, db, "replica-a", dispatcher.PerKey, dispatcher.WakeupRequired, 1500*time.Millisecond, nil)
	waitFor(t, "a reports b", func() bool { _, ok := conflictWith(a, "replica-b"); return ok })
	require.Empty(t, b.Health().ModeConflicts, "b hears nothing without a listener")
	require.Zero(t, b.Stats().Hellos)
	require.NoError(t, b.Stop(t.Context()))
	waitFor(t, "a forgets b", func() bool { return len(a.Health().ModeConflicts) == 0 })
}

// Two replicas of the same mode hear each other and report no conflict.
func TestModeSameNoConflict(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	a, logsA := replica(t, db, "replica-a", dispatcher.PerKey, dispatcher.WakeupRequired, 1500*time.Millisecond, nil)
	b, logsB := replica(t, db, "replica-b", dispatcher.PerKey, dispatcher.WakeupRequired, 1500*time.Millisecond, nil)
	waitFor(t, "each heard the other twice", func() bool { return a.Stats().Hellos >= 2 && b.Stats().Hellos >= 2 })
	require.Empty(t, a.Health().ModeConflicts)
	require.Empty(t, b.Health().ModeConflicts)
	require.Zero(t, a.Stats().ModeConflicts)
	require.Zero(t, logsA.count(slog.LevelWarn, "other_owner", "replica-b"))
	require.Zero(t, logsB.count(slog.LevelWarn, "other_owner", "replica-a"))
}
