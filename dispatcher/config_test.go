package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The settings that -1 used to spell have fields of their own; a -1 is
// now out of range, and the error names the field to set instead.
func TestNewSpecialSettings(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	for _, tc := range []struct {
		field, want string
		mutate      func(*dispatcher.Config)
	}{
		{"HandlerTimeout", "set NoHandlerTimeout", func(c *dispatcher.Config) { c.HandlerTimeout = -1 }},
		{"HandlerTimeout", "must be zero when NoHandlerTimeout is set", func(c *dispatcher.Config) {
			c.HandlerTimeout, c.NoHandlerTimeout = time.Second, true
		}},
		{"DrainTimeout", "set NoDrain", func(c *dispatcher.Config) { c.DrainTimeout = -1 }},
		{"DrainTimeout", "must be zero when NoDrain is set", func(c *dispatcher.Config) {
			c.DrainTimeout, c.NoDrain = time.Second, true
		}},
		{"WakeupCooldown", "set NoWakeupCooldown", func(c *dispatcher.Config) { c.WakeupCooldown = -1 }},
		{"WakeupCooldown", "must be zero when NoWakeupCooldown is set", func(c *dispatcher.Config) {
			c.WakeupCooldown, c.NoWakeupCooldown = time.Second, true
		}},
		{"Backoff.Jitter", "set NoJitter", func(c *dispatcher.Config) { c.Backoff = outbox.Backoff{Jitter: -1} }},
		{"RetainSent", "set KeepSent", func(c *dispatcher.Config) { c.RetainSent = -1 }},
		{"RetainSent", "must be zero when KeepSent is set", func(c *dispatcher.Config) {
			c.RetainSent, c.KeepSent = time.Hour, true
		}},
		{"RetainFailed", "must be zero (keep FAILED rows) or between 1m (and twice LeaseDuration) and 100 years", func(c *dispatcher.Config) { c.RetainFailed = -1 }},
		{"RetainFailed", "must be zero (keep FAILED rows) or between 1m (and twice LeaseDuration) and 100 years", func(c *dispatcher.Config) { c.RetainFailed = time.Millisecond }},
		{"RetainSent", "between 1m (and twice LeaseDuration)", func(c *dispatcher.Config) { c.RetainSent = 59 * time.Second }},
		{"RetainSent", "between 1m (and twice LeaseDuration)", func(c *dispatcher.Config) {
			c.RetainSent, c.LeaseDuration = 119*time.Second, time.Minute
		}},
		{"RetainFailed", "twice LeaseDuration", func(c *dispatcher.Config) {
			c.RetainFailed, c.LeaseDuration = 10*time.Minute, 6*time.Minute
		}},
		{"RetentionInterval", "must be between 10ms and 24h", func(c *dispatcher.Config) { c.RetentionInterval = time.Millisecond }},
		{"RetentionBatchSize", "must be between 1 and 100000", func(c *dispatcher.Config) { c.RetentionBatchSize = 100_001 }},
		{"CircuitMinBackoff", "must be between 10ms and 1h", func(c *dispatcher.Config) { c.CircuitMinBackoff = time.Millisecond }},
		{"CircuitMaxBackoff", "must be between CircuitMinBackoff and 24h", func(c *dispatcher.Config) {
			c.CircuitMinBackoff, c.CircuitMaxBackoff = time.Minute, time.Second
		}},
		{"CircuitProbeSize", "must be between 1 and BatchSize", func(c *dispatcher.Config) { c.BatchSize, c.CircuitProbeSize = 10, 11 }},
		{"CircuitProbeSize", "must be between 1 and BatchSize", func(c *dispatcher.Config) { c.CircuitProbeSize = -1 }},
	} {
		cfg := baseConfig(db)
		tc.mutate(&cfg)
		_, err := dispatcher.New(db.Pool, cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, tc.want)
		require.Equal(t, tc.field, ce.Field)
		require.ErrorContains(t, err, tc.want)
	}
	cfg := baseConfig(db)
	cfg.NoHandlerTimeout, cfg.NoDrain, cfg.NoWakeupCooldown, cfg.KeepSent = true, true, true, true
	_, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
}

// NoHandlerTimeout gives handlers a context without a deadline; by default
// they get one.
func TestNoHandlerTimeout(t *testing.T) {
	t.Parallel()
	for _, none := range []bool{false, true} {
		db := testdb.NewMigrated(t)
		insertEvents(t, db, "x", 1)
		cfg := baseConfig(db)
		cfg.NoHandlerTimeout = none
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		hasDeadline := make(chan bool, 1)
		require.NoError(t, d.Handle("x", func(ctx context.Context, _ outbox.Event) error {
			_, ok := ctx.Deadline()
			hasDeadline <- ok
			return nil
		}))
		runDispatcher(t, d)
		require.Equal(t, !none, <-hasDeadline)
	}
}

// NoDrain cancels running handlers as soon as a stop begins, where the
// default would wait up to 30s for them.
func TestNoDrain(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "x", 1)
	cfg := baseConfig(db)
	cfg.NoDrain = true
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	started := make(chan struct{})
	require.NoError(t, d.Handle("x", func(ctx context.Context, _ outbox.Event) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	<-started
	begun := time.Now()
	require.ErrorIs(t, d.Stop(testctx.New(t)), dispatcher.ErrDrainTimeout)
	require.ErrorIs(t, <-errc, dispatcher.ErrDrainTimeout)
	require.Less(t, time.Since(begun), 5*time.Second)
}

// A dispatcher given another Table than the one migrated (here: another
// name in the same schema) fails at start with outbox.ErrMissingTable
// instead of polling a table that never fills.
func TestRunDetectsTableMismatch(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.Table.Name = "other_events"
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	err = d.Run(testctx.New(t))
	require.ErrorIs(t, err, outbox.ErrMissingTable)
	require.ErrorContains(t, err, db.Schema+".other_events")
}

// A dispatcher started on a table that an older version migrated (here:
// without the snoozes column of migration 3) fails at start with
// outbox.ErrSchemaMismatch naming the column, instead of failing every
// claim and telling only OnError: by migrations.Verify, and with
// SkipVerify by the check of the columns it uses.
func TestRunDetectsAnOlderSchema(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `ALTER TABLE outbox_events DROP COLUMN snoozes`)
	require.NoError(t, err)
	for _, skip := range []bool{false, true} {
		cfg := baseConfig(db)
		cfg.SkipVerify = skip
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		err = d.Run(testctx.New(t))
		require.ErrorIs(t, err, outbox.ErrSchemaMismatch, "SkipVerify %v", skip)
		require.ErrorContains(t, err, "snoozes")
		if skip {
			require.ErrorContains(t, err, "migrations.Migrate")
		} else {
			require.ErrorContains(t, err, "actual missing")
		}
	}
}
