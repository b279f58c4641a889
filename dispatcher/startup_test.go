package dispatcher_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// silentConfig is a connection config for the silent server at addr.
func silentConfig(t *testing.T, addr string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=600")
	require.NoError(t, err)
	return cfg
}

// A stop or a cancelled context ends a Run that is still in its start-up
// checks, against a server that never answers, within the stop's own
// deadline; Run then returns nil, as after a stop once started.
func TestStopDuringStartUp(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)

	silentPool := func(t *testing.T) (*pgxpool.Pool, <-chan struct{}) {
		addr, reached := testdb.SilentServer(t)
		cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable")
		require.NoError(t, err)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool, reached
	}
	silentListener := func(t *testing.T) (*pgxpool.Pool, dispatcher.Config, <-chan struct{}) {
		addr, reached := testdb.SilentServer(t)
		cfg := baseConfig(db)
		cfg.Wakeup = dispatcher.WakeupRequired
		cfg.WakeupProbeTimeout = time.Minute
		cfg.ListenerConnConfig = silentConfig(t, addr)
		return db.Pool, cfg, reached
	}
	silentTable := func(t *testing.T) (*pgxpool.Pool, dispatcher.Config, <-chan struct{}) {
		pool, reached := silentPool(t)
		return pool, baseConfig(db), reached
	}
	cases := []struct {
		name   string
		cancel bool // cancel Run's ctx instead of calling Stop
		setup  func(t *testing.T) (*pgxpool.Pool, dispatcher.Config, <-chan struct{})
	}{
		{"stop while checking the table", false, silentTable},
		{"cancel while checking the table", true, silentTable},
		{"stop while probing wake-ups", false, silentListener},
		{"cancel while probing wake-ups", true, silentListener},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, cfg, reached := tc.setup(t)
			cfg.LeaseDuration = time.Minute // operations may take 30s: longer than the test waits
			d, err := dispatcher.New(pool, cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- d.Run(ctx) }()
			receive(t, "Run to reach the silent server", reached)

			if tc.cancel {
				cancel()
			} else {
				require.NoError(t, d.Stop(testctx.New(t)), "Stop must end a starting Run")
			}
			require.NoError(t, receive(t, "Run to leave its start-up checks", errc), "a stop during start-up is a clean stop")
		})
	}
}

// Start reports a missing table before it returns, and leaves the
// dispatcher as New returned it: once the table is migrated, the same
// dispatcher starts and delivers.
func TestStartReportsMissingTableAndMayBeRetried(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // not migrated
	d, err := dispatcher.New(db.Pool, baseConfig(db))
	require.NoError(t, err)
	sent := make(chan uuid.UUID, 1)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		sent <- e.ID
		return nil
	}))

	err = d.Start(context.Background())
	require.ErrorIs(t, err, outbox.ErrMissingTable)
	require.ErrorContains(t, err, db.Table().String())
	require.Equal(t, dispatcher.StateNew, d.Health().State)
	select {
	case <-d.Done():
		t.Fatal("a failed start must not stop the dispatcher")
	default:
	}

	require.NoError(t, migrations.Migrate(context.Background(), db.Pool, migrations.Config{Table: db.Table()}))
	runDispatcher(t, d)
	id := insertEvents(t, db, "x", 1)[0]
	require.Equal(t, id, <-sent)
}

// A table whose schema drifted from what this version needs (here: a
// column lost its NOT NULL) makes Start fail, naming the object with its
// expected and actual state; nothing is claimed. SkipVerify starts on it.
func TestStartRefusesSchemaDrift(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `ALTER TABLE outbox_events ALTER COLUMN attempts DROP NOT NULL`)
	require.NoError(t, err)
	id := insertEvents(t, db, "x", 1)[0]
	handled := make(chan struct{}, 1)
	newDispatcher := func(skip bool) *dispatcher.Dispatcher {
		cfg := baseConfig(db)
		cfg.SkipVerify = skip
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
			handled <- struct{}{}
			return nil
		}))
		return d
	}

	err = newDispatcher(false).Start(context.Background())
	require.ErrorIs(t, err, outbox.ErrSchemaMismatch)
	var verr *migrations.VerifyError
	require.ErrorAs(t, err, &verr)
	object := "column " + db.Table().String() + ".attempts"
	require.Equal(t, []migrations.Problem{{Object: object, Expected: "integer NOT NULL DEFAULT 0", Actual: "integer DEFAULT 0"}}, verr.Problems)
	require.ErrorContains(t, err, object+": expected integer NOT NULL DEFAULT 0, actual integer DEFAULT 0")
	require.ErrorContains(t, err, "SkipVerify")
	require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id), "nothing claimed")

	runDispatcher(t, newDispatcher(true))
	<-handled
}

// A schema version newer than this library knows (a later release
// migrated the table during a rolling upgrade) is no reason to refuse.
func TestStartAcceptsNewerSchemaVersion(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `UPDATE outbox_events_schema_version SET version = version + 1`)
	require.NoError(t, err)
	d, err := dispatcher.New(db.Pool, baseConfig(db))
	require.NoError(t, err)
	runDispatcher(t, d)
	require.Equal(t, dispatcher.StateRunning, d.Health().State)
}

// On a newer schema version, definitions that a later release changed (a
// default, a CHECK) are accepted and logged at INFO; an object this
// version relies on that is missing (a dropped column) still refuses the
// start.
func TestStartOnNewerSchemaRefusesOnlyMissingObjects(t *testing.T) {
	t.Parallel()
	newer := `UPDATE outbox_events_schema_version SET version = version + 1`
	t.Run("ChangedDefinitions", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		_, err := db.Pool.Exec(context.Background(), newer+`;
ALTER TABLE outbox_events ALTER COLUMN headers SET DEFAULT '{"v": 1}';
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_error_check;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_error_check CHECK (char_length(last_error) <= 4096)`)
		require.NoError(t, err)
		logs := &logRecorder{}
		cfg := baseConfig(db)
		cfg.Logger = slog.New(logs)
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		require.Equal(t, dispatcher.StateRunning, d.Health().State)
		logs.mu.Lock()
		defer logs.mu.Unlock()
		require.True(t, slices.ContainsFunc(logs.records, func(r slog.Record) bool {
			return r.Level == slog.LevelInfo && strings.Contains(r.Message, "schema is newer")
		}), "the differences logged at INFO")
	})
	t.Run("MissingColumn", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		_, err := db.Pool.Exec(context.Background(), newer+`; ALTER TABLE outbox_events DROP COLUMN started_at`)
		require.NoError(t, err)
		d, err := dispatcher.New(db.Pool, baseConfig(db))
		require.NoError(t, err)
		err = d.Start(context.Background())
		require.ErrorIs(t, err, outbox.ErrSchemaMismatch)
		require.ErrorContains(t, err, "started_at: expected")
		require.Equal(t, dispatcher.StateNew, d.Health().State)
	})
}

// A dispatcher runs once: Start or Run while it runs returns ErrRunning,
// after it stopped ErrStopped; Stop returns the result of dispatching,
// which Done and Err report too.
func TestStartRunsOnce(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	d, err := dispatcher.New(db.Pool, baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	require.Equal(t, dispatcher.StateRunning, d.Health().State)
	require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrRunning)
	require.ErrorIs(t, d.Run(context.Background()), dispatcher.ErrRunning)
	require.ErrorIs(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }), dispatcher.ErrStarted)

	require.NoError(t, d.Stop(context.Background()))
	<-d.Done()
	require.NoError(t, d.Err())
	require.Equal(t, dispatcher.StateStopped, d.Health().State)
	require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrStopped)
	require.ErrorIs(t, d.Run(context.Background()), dispatcher.ErrStopped)
	require.NoError(t, d.Stop(context.Background()), "Stop is idempotent")
}

// The end of Start's ctx stops the dispatcher as Stop does: it drains,
// and a handler cancelled at the drain timeout makes the result
// ErrDrainTimeout, which Err, Health and a later Stop report.
func TestStartStopsWhenCtxEnds(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	cfg := baseConfig(db)
	cfg.DrainTimeout = 50 * time.Millisecond
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	started := make(chan struct{})
	require.NoError(t, d.Handle("x", func(ctx context.Context, _ outbox.Event) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, d.Start(ctx))
	<-started
	cancel()
	<-d.Done()
	require.ErrorIs(t, d.Err(), dispatcher.ErrDrainTimeout)
	require.ErrorIs(t, d.Health().Err, dispatcher.ErrDrainTimeout)
	require.ErrorIs(t, d.Stop(context.Background()), dispatcher.ErrDrainTimeout)
	require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id), "back to PENDING, no attempt spent")
}

// A Start interrupted by Stop or by its ctx during the start-up checks
// returns ErrStopped or ctx's error, never nil: nothing is dispatching.
func TestStartInterrupted(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.Wakeup = dispatcher.WakeupRequired
	cfg.WakeupProbeTimeout = time.Minute
	addr, _ := testdb.SilentServer(t)
	cfg.ListenerConnConfig = silentConfig(t, addr)
	cfg.LeaseDuration = time.Minute // operations may take 30s: longer than the test waits

	t.Run("ByStop", func(t *testing.T) {
		t.Parallel()
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() { errc <- d.Start(context.Background()) }()
		waitFor(t, "the start-up checks", func() bool { return d.Health().State == dispatcher.StateStarting })
		require.NoError(t, d.Stop(context.Background()))
		require.ErrorIs(t, <-errc, dispatcher.ErrStopped)
	})
	t.Run("ByCtx", func(t *testing.T) {
		t.Parallel()
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- d.Start(ctx) }()
		waitFor(t, "the start-up checks", func() bool { return d.Health().State == dispatcher.StateStarting })
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		<-d.Done()
		require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrStopped)
	})
}

// A schema check that runs out of time does not keep the dispatcher from
// starting (a statement timeout must never stop progress): here the
// version table is locked by an open transaction for the whole test, so
// Verify's read of it meets the pool's statement_timeout every time, while
// the outbox table itself stays free. Start logs a warning and dispatches.
func TestStartGoesOnWhenVerifyRunsOutOfTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	locker, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Rollback(ctx) })
	_, err = locker.Exec(ctx, `LOCK TABLE outbox_events_schema_version IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	logs := &logRecorder{}
	cfg := baseConfig(db)
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(poolWith(t, db, map[string]string{"statement_timeout": "200ms"}), cfg)
	require.NoError(t, err)
	handled := make(chan struct{}, 1)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		handled <- struct{}{}
		return nil
	}))
	runDispatcher(t, d)
	insertEvents(t, db, "x", 1)
	<-handled
	logs.mu.Lock()
	defer logs.mu.Unlock()
	warned := slices.ContainsFunc(logs.records, func(r slog.Record) bool {
		return r.Level == slog.LevelWarn && strings.Contains(r.Message, "could not verify the outbox schema")
	})
	require.True(t, warned, "a warning says the check was skipped")
	require.True(t, d.Health().VerifySkipped)
	hinted := slices.ContainsFunc(logs.records, func(r slog.Record) bool {
		fix := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "fix" {
				fix = a.Value.String()
			}
			return true
		})
		return strings.Contains(fix, "statement_timeout") && strings.Contains(fix, "SkipVerify")
	})
	require.True(t, hinted, "the warning says how to fix it")
}

// A start-up check whose connection is terminated under it (a server
// restarting, an operator's pg_terminate_backend) is tried again: Start
// succeeds and the dispatcher dispatches. The pool's first connection is
// terminated by another backend before its first query.
func TestStartTriesAgainAfterALostConnection(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	var terminated atomic.Bool
	cfg.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if terminated.CompareAndSwap(false, true) {
			_, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, c.PgConn().PID())
			require.NoError(t, err)
		}
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := dispatcher.New(pool, baseConfig(db))
	require.NoError(t, err)
	sent := make(chan uuid.UUID, 1)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		sent <- e.ID
		return nil
	}))
	runDispatcher(t, d)
	require.True(t, terminated.Load(), "the first connection was terminated")
	id := insertEvents(t, db, "x", 1)[0]
	require.Equal(t, id, <-sent)
}
