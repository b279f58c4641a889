package lease_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// staleOutcomes are every completion a stale worker may attempt on one row.
func staleOutcomes(ref lease.Ref) map[string]lease.CompleteParams {
	return map[string]lease.CompleteParams{
		"sent":         {Sent: []lease.Ref{ref}},
		"sent, delete": {Sent: []lease.Ref{ref}, DeleteSent: true},
		"retry": {Failed: []lease.Failure{{Ref: ref, Code: outbox.CodeHandlerError,
			Message: "stale", Delay: time.Second}}},
		"final": {Failed: []lease.Failure{{Ref: ref, Code: outbox.CodeHandlerError,
			Message: "stale", Final: true}}},
	}
}

// requireAllLost runs every stale completion of ref and checks that each
// reports the row lost and leaves it exactly as it was.
func requireAllLost(t *testing.T, e env, ref lease.Ref) {
	t.Helper()
	before := get(t, e.db.Pool, ref.ID)
	for name, p := range staleOutcomes(ref) {
		res, err := e.store.Complete(t.Context(), e.db.Pool, p)
		require.NoError(t, err, name)
		require.Empty(t, res.Sent, name)
		require.Empty(t, res.Retried, name)
		require.Empty(t, res.Failed, name)
		require.Equal(t, []uuid.UUID{ref.ID}, res.Lost, name)
		require.Equal(t, before, get(t, e.db.Pool, ref.ID), "%s changed the row", name)
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()

	t.Run("expired lease completes nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		expire(t, e.db.Pool, b.Events[0].ID)
		requireAllLost(t, e, b.Refs()[0])
		require.Equal(t, "PROCESSING", get(t, e.db.Pool, b.Events[0].ID).Status)
	})

	t.Run("expired lease renews nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		expire(t, e.db.Pool, b.Events[0].ID)
		before := get(t, e.db.Pool, b.Events[0].ID)
		renewed, err := e.store.Renew(t.Context(), e.db.Pool, b.Refs(), time.Hour)
		require.NoError(t, err)
		require.Empty(t, renewed.Done)
		require.Equal(t, before, get(t, e.db.Pool, b.Events[0].ID))
	})

	t.Run("re-claimed row ignores the old token", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		old := claimOne(t, e, "stale")
		id := old.Events[0].ID
		expire(t, e.db.Pool, id)
		rec, err := e.store.Recover(t.Context(), e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 5})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, rec.Pending)
		current := claimOne(t, e, "current")
		require.NotEqual(t, old.Token, current.Token)

		requireAllLost(t, e, old.Refs()[0])
		held := get(t, e.db.Pool, id)
		renewed, err := e.store.Renew(t.Context(), e.db.Pool, old.Refs(), 10*time.Hour)
		require.NoError(t, err)
		require.Empty(t, renewed.Done)
		require.Equal(t, held, get(t, e.db.Pool, id), "a stale renew moved the new holder's lease")

		// The current holder still completes.
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: current.Refs()})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, res.Sent)
		require.Empty(t, res.Lost)
	})

	t.Run("wrong token completes nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		requireAllLost(t, e, lease.Ref{ID: b.Events[0].ID, Token: uuid.New()})
		r := get(t, e.db.Pool, b.Events[0].ID)
		require.Equal(t, "PROCESSING", r.Status)
		require.Equal(t, &b.Token, r.LockToken)
	})
}

func TestRenew(t *testing.T) {
	t.Parallel()

	t.Run("empty refs", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		renewed, err := e.store.Renew(t.Context(), e.db.Pool, nil, time.Minute)
		require.NoError(t, err)
		require.Empty(t, renewed.Done)
	})

	t.Run("moves held leases forward on the database clock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 3)

		before := dbClock(t, e.db.Pool)
		renewed, err := e.store.Renew(t.Context(), e.db.Pool, b.Refs(), 2*time.Hour)
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.ElementsMatch(t, b.Refs(), renewed.Done)
		for _, ref := range renewed.Done {
			id := ref.ID
			r := get(t, e.db.Pool, id)
			require.Equal(t, "PROCESSING", r.Status)
			require.Equal(t, &b.Token, r.LockToken)
			between(t, *r.HeartbeatAt, before, after, "heartbeat_at")
			require.Equal(t, 2*time.Hour, r.LeaseUntil.Sub(*r.HeartbeatAt), "lease_until = now() + lease")
			require.True(t, r.LeaseUntil.After(b.LeaseUntil))
		}
	})

	t.Run("returns only the rows still held", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		refs := claimN(t, e, 4).Refs()
		held, expired, completed, wrong := refs[0], refs[1], refs[2], refs[3]
		expire(t, e.db.Pool, expired.ID)
		_, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: []lease.Ref{completed}})
		require.NoError(t, err)
		wrong.Token = uuid.New()
		wrongBefore := get(t, e.db.Pool, wrong.ID)

		renewed, err := e.store.Renew(t.Context(), e.db.Pool, []lease.Ref{held, expired, completed, wrong}, time.Hour)
		require.NoError(t, err)
		require.Equal(t, []lease.Ref{held}, renewed.Done)
		require.Empty(t, renewed.Busy)
		require.Equal(t, "SENT", get(t, e.db.Pool, completed.ID).Status)
		require.Equal(t, wrongBefore, get(t, e.db.Pool, wrong.ID))
		require.True(t, get(t, e.db.Pool, expired.ID).LeaseUntil.Before(dbClock(t, e.db.Pool)))
	})
}
