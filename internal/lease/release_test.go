package lease_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
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
