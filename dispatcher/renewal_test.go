package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// When this dispatcher's lease expires in the database under a running
// handler (as after a pause) and its own recovery and claim take the event
// back under a new token, the stale handler's context ends (the new claim
// took the row, and the renewals credit each claim only), with cause
// outbox.ErrLockLost; the new claim is released rather than held behind
// the stale call, and the event runs again once the stale one returned.
func TestRenewalOfNewClaimDoesNotKeepStaleAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	log := newCallLog()
	staleCtx, unblock := make(chan context.Context, 1), make(chan struct{})
	cfg := baseConfig(db)
	cfg.LeaseDuration = 3 * time.Second // a heartbeat every second
	cfg.RecoverEvery = 1
	// Local deadlines never pass: only a renewal can give up the stale
	// attempt.
	dispatcher.SetClock(&cfg, frozenClock())
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(ctx context.Context, e outbox.Event) error {
		log.enter(e.ID)
		defer log.exit(e.ID)
		if log.count(e.ID) == 1 {
			staleCtx <- ctx
			<-unblock // ignores its context
		}
		return nil
	}))
	runDispatcher(t, d)
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release) // before the stop, should the test fail
	stale := <-staleCtx

	// Expire the lease just after a renewal, so that recovery and the new
	// claim (a poll or two) come well before the next beat, which then
	// renews the new claim alone.
	waitFor(t, "a renewal", func() bool {
		var renewed bool
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT heartbeat_at > locked_at FROM outbox_events WHERE id = $1`, id).Scan(&renewed))
		return renewed
	})
	expireLease(t, db, id)
	waitFor(t, "recovery and a new claim", func() bool { return d.Stats().Claimed == 2 })

	// Were the new claim's renewals keeping the stale attempt alive, its
	// context would never end.
	receive(t, "the stale attempt's context to be cancelled", stale.Done())
	require.ErrorIs(t, context.Cause(stale), outbox.ErrLockLost)
	require.Equal(t, 1, log.count(id), "no new attempt beside the stale one")

	release()
	waitFor(t, "SENT", func() bool { return readRow(t, db, id).Status == outbox.StatusSent })
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id))
	require.Equal(t, 2, log.count(id))
	require.Empty(t, log.overlap)
	waitFor(t, "the stale outcome reported lost", func() bool { return d.Stats().LockLost == 1 })
}
