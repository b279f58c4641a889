package lease_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestRelease(t *testing.T) {
	t.Parallel()

	t.Run("empty refs", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		released, err := e.store.Release(t.Context(), e.db.Pool, nil)
		require.NoError(t, err)
		require.Empty(t, released.Done)
	})

	t.Run("old token after a re-claim changes nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		old := claimOne(t, e, "stale")
		id := old.Events[0].ID
		expire(t, e.db.Pool, id)
		_, err := e.store.Recover(t.Context(), e.db.Pool, defaultRecover)
		require.NoError(t, err)
		current := claimOne(t, e, "current")
		held := get(t, e.db.Pool, id)

		released, err := e.store.Release(t.Context(), e.db.Pool, old.Refs())
		require.NoError(t, err)
		require.Empty(t, released.Done)
		require.Equal(t, held, get(t, e.db.Pool, id))
		require.Equal(t, &current.Token, held.LockToken)
	})

	t.Run("returns rows to pending unchanged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		all := insert(t, e.db.Pool, spec{DueIn: -time.Hour}, spec{DueIn: -time.Minute}, spec{})
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 3 WHERE id = $1`, all[0])
		require.NoError(t, err)
		due := make(map[uuid.UUID]time.Time)
		for _, id := range all {
			due[id] = get(t, e.db.Pool, id).NextAttemptAt
		}
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 3, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, b.Events, 3)
		// Releasing needs no unexpired lease.
		expire(t, e.db.Pool, all[2])

		released, err := e.store.Release(t.Context(), e.db.Pool, b.Refs())
		require.NoError(t, err)
		require.ElementsMatch(t, b.Refs(), released.Done)
		for i, id := range all {
			r := get(t, e.db.Pool, id)
			require.Equal(t, "PENDING", r.Status, "row %d", i)
			require.True(t, r.NextAttemptAt.Equal(due[id]), "row %d: next_attempt_at moved", i)
			require.Zero(t, r.Recoveries, "row %d", i)
			require.Empty(t, r.AttemptLog, "row %d: a release is no attempt", i)
			requireLeaseCleared(t, r)
		}
		require.Equal(t, 3, get(t, e.db.Pool, all[0]).Attempts)
		require.Zero(t, get(t, e.db.Pool, all[1]).Attempts)

		// Released rows are claimable again, in their old order.
		again, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w2", Limit: 3, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, all, batchIDs(again))
		require.Equal(t, 4, again.Events[0].Attempt)
	})

	t.Run("wrong token changes nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		id := b.Events[0].ID
		before := get(t, e.db.Pool, id)
		released, err := e.store.Release(t.Context(), e.db.Pool, []lease.Ref{{ID: id, Token: uuid.New()}})
		require.NoError(t, err)
		require.Empty(t, released.Done)
		require.Equal(t, before, get(t, e.db.Pool, id))
	})
}

// ReleaseLater returns claimed rows unstarted and uncharged, due again
// after a tenth of their age, within [min, max].
func TestReleaseLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := insert(t, e.db.Pool, spec{}, spec{}, spec{})
	// ages: new (min applies), 20 minutes (a tenth: 2 minutes), 2 hours (max applies)
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 2, recoveries = 1, snoozes = 3,
		created_at = now() - CASE id WHEN $2 THEN interval '20 minutes' WHEN $3 THEN interval '2 hours' ELSE interval '0' END
		WHERE id = ANY($1)`, ids, ids[1], ids[2])
	require.NoError(t, err)
	b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 3, Start: 3, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, b.Events, 3)

	released, err := e.store.ReleaseLater(t.Context(), e.db.Pool, b.Refs(), time.Second, 5*time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, b.Refs(), released.Done)
	var now time.Time
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
	for i, want := range []time.Duration{time.Second, 2 * time.Minute, 5 * time.Minute} {
		r := get(t, e.db.Pool, ids[i])
		require.Equal(t, "PENDING", r.Status, "row %d", i)
		require.Equal(t, []int{2, 1, 3}, []int{r.Attempts, r.Recoveries, r.Snoozes}, "row %d: attempts, recoveries, snoozes", i)
		require.Empty(t, r.AttemptLog, "row %d: a release is no attempt", i)
		requireLeaseCleared(t, r)
		var started *time.Time
		require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT started_at FROM outbox_events WHERE id = $1`, ids[i]).Scan(&started))
		require.Nil(t, started, "row %d: no start mark left", i)
		delay := r.NextAttemptAt.Sub(now)
		require.InDelta(t, want.Seconds(), delay.Seconds(), 5, "row %d: due again after %s", i, delay)
	}

	_, err = e.store.ReleaseLater(t.Context(), e.db.Pool, b.Refs(), time.Minute, time.Second)
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
}
