package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes delivers events end to end in each pgx query exec mode,
// directly and through PgBouncer in transaction mode (with the listener
// connected to PostgreSQL directly): claims, starts, renewals, retries,
// recovery and completions all go through the mode.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		db := testdb.NewMigrated(t)
		ids := insertEvents(t, db, "t", 12)
		// One row held by a worker that died: recovery returns it.
		_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'PROCESSING', lock_token = gen_random_uuid(),
			lock_owner = 'dead', locked_at = now(), lease_until = now() - interval '1 second' WHERE id = $1`, ids[0])
		require.NoError(t, err)

		cfg := baseConfig(db)
		cfg.BatchSize, cfg.Concurrency = 4, 2 // claims ahead: events start after their claim
		cfg.LeaseDuration = time.Second       // renewed about every 333ms
		cfg.RecoverEvery = 1
		cfg.Wakeup = dispatcher.WakeupRequired
		if r.Bouncer != nil {
			cfg.ListenerConnConfig = db.DirectConnConfig(t)
		}
		var mu sync.Mutex
		var errs []error
		cfg.OnError = func(err error) {
			// A statement that ran out of its time (half the one-second
			// lease) on a loaded machine is retried by the dispatcher: it
			// says nothing about the exec mode, which is what this test
			// checks.
			if errors.Is(err, context.DeadlineExceeded) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}
		d, err := dispatcher.New(db.RoutePool(t, r, 4), cfg)
		require.NoError(t, err)
		var failedOnce sync.Once
		require.NoError(t, d.Handle("t", func(ctx context.Context, e outbox.Event) error {
			switch e.ID {
			case ids[1]:
				var err error
				failedOnce.Do(func() { err = errors.New("once") })
				return err
			case ids[2]:
				time.Sleep(700 * time.Millisecond) // outlives a heartbeat
			}
			return nil
		}))
		runDispatcher(t, d)

		reported := func() []error {
			mu.Lock()
			defer mu.Unlock()
			return append([]error(nil), errs...)
		}
		waitFor(t, "every event SENT, or an error", func() bool {
			return len(reported()) > 0 || statusCounts(t, db)[outbox.StatusSent] == len(ids)
		})
		require.Empty(t, reported())
		s := d.Stats()
		require.Equal(t, uint64(1), s.Retried)
		require.Equal(t, uint64(1), s.Recovered)
		require.True(t, s.WakeupsActive)
	})
}
