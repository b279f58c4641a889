package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// recoverWithin runs Recover bounded by the run's -timeout, so that a
// Recover that waits on a row lock (held until the test ends) instead of
// skipping it fails the test instead of hanging.
func recoverWithin(t *testing.T, e env, p lease.RecoverParams) lease.RecoverResult {
	t.Helper()
	res, err := e.store.Recover(testctx.New(t), e.db.Pool, p)
	require.NoError(t, err, "Recover must skip locked rows, not wait for them")
	return res
}

// requireNotRecovered checks that Recover leaves alone the row tx holds
// locked, both while tx is open and after it commits.
func requireNotRecovered(t *testing.T, e env, tx pgx.Tx) {
	t.Helper()
	res := recoverWithin(t, e, defaultRecover)
	require.Empty(t, res.Pending, "Recover took a row another transaction holds locked")
	require.Empty(t, res.Failed, "Recover took a row another transaction holds locked")
	require.NoError(t, tx.Commit(t.Context()))
	res = recoverWithin(t, e, defaultRecover)
	require.Empty(t, res.Pending, "Recover took the row after the other transaction committed")
	require.Empty(t, res.Failed, "Recover took the row after the other transaction committed")
}

// expiredAndTx claims one new row for owner, expires its lease, and opens
// a transaction that the test may use to hold the row's lock.
func expiredAndTx(t *testing.T, e env, owner string) (lease.Batch, pgx.Tx) {
	t.Helper()
	insertDue(t, e.db.Pool, 1)
	b := claimOne(t, e, owner)
	expire(t, e.db.Pool, b.Events[0].ID)
	tx, err := e.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return b, tx
}

var defaultRecover = lease.RecoverParams{Limit: 100, MaxRecoveries: 3}

func TestRecover(t *testing.T) {
	t.Parallel()

	t.Run("at most once fails at once", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		id := b.Events[0].ID
		expire(t, e.db.Pool, id)
		res := recoverWithin(t, e, lease.RecoverParams{Limit: 10, MaxRecoveries: 100, AtMostOnce: true})
		require.Empty(t, res.Pending)
		require.Len(t, res.Failed, 1)
		require.Equal(t, id, res.Failed[0].ID)
		require.Equal(t, "test.event", res.Failed[0].Type)
		r := requireIn(t, e.db.Pool, id, "outbox_events_dead", "FAILED")
		require.Equal(t, string(outbox.CodeWorkerLost), *r.LastErrorCode)
		require.NotNil(t, r.FailedAt)
		require.Zero(t, r.Attempts)
		requireLeaseCleared(t, r)
		require.Equal(t, "failed", lastLog(t, r).Outcome)
	})

	t.Run("expired row returns to pending", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := insert(t, e.db.Pool, spec{DueIn: -time.Hour})[0]
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 2, recoveries = 1 WHERE id = $1`, id)
		require.NoError(t, err)
		b := claimOne(t, e, "crashed-worker")
		expire(t, e.db.Pool, id)

		before := dbClock(t, e.db.Pool)
		res := recoverWithin(t, e, defaultRecover)
		after := dbClock(t, e.db.Pool)
		require.Equal(t, []uuid.UUID{id}, res.Pending)
		require.Empty(t, res.Failed)

		r := get(t, e.db.Pool, id)
		require.Equal(t, "PENDING", r.Status)
		require.Equal(t, 2, r.Attempts, "recovery spends no retry budget")
		require.Equal(t, 2, r.Recoveries)
		between(t, r.NextAttemptAt, before, after, "next_attempt_at (due now)")
		require.Equal(t, string(outbox.CodeWorkerLost), *r.LastErrorCode)
		require.NotEmpty(t, *r.LastError)
		require.Nil(t, r.FailedAt)
		requireLeaseCleared(t, r)
		entry := lastLog(t, r)
		require.Equal(t, "recovered", entry.Outcome)
		require.Equal(t, 3, entry.Attempt)
		require.Equal(t, "crashed-worker", entry.Owner)
		require.Equal(t, string(outbox.CodeWorkerLost), *entry.Code)

		// Due at once for the next claimer, with the same attempt number.
		again := claimOne(t, e, "w2")
		require.Equal(t, 3, again.Events[0].Attempt)
		require.NotEqual(t, b.Token, again.Token)
	})

	t.Run("limit bounds the rows touched", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		expire(t, e.db.Pool, batchIDs(claimN(t, e, 5))...)

		res := recoverWithin(t, e, lease.RecoverParams{Limit: 2, MaxRecoveries: 3})
		require.Len(t, res.Pending, 2)
		require.Equal(t, 2, countStatus(t, e.db.Pool, "PENDING"))
		require.Equal(t, 3, countStatus(t, e.db.Pool, "PROCESSING"))

		res = recoverWithin(t, e, lease.RecoverParams{Limit: 10, MaxRecoveries: 3})
		require.Len(t, res.Pending, 3)
		require.Equal(t, 5, countStatus(t, e.db.Pool, "PENDING"))
	})

	t.Run("nothing expired", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 2)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, Start: 1})
		require.NoError(t, err)
		held := get(t, e.db.Pool, b.Events[0].ID)
		res := recoverWithin(t, e, defaultRecover)
		require.Empty(t, res.Pending)
		require.Empty(t, res.Failed)
		require.Equal(t, held, get(t, e.db.Pool, held.ID))
		require.Equal(t, 1, countStatus(t, e.db.Pool, "PENDING"))
	})

	t.Run("poison event fails past the cap", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := insertDue(t, e.db.Pool, 1)[0]
		const maxRecoveries = 2
		p := lease.RecoverParams{Limit: 10, MaxRecoveries: maxRecoveries}
		for n := 1; n <= maxRecoveries; n++ {
			claimOne(t, e, "w")
			expire(t, e.db.Pool, id)
			res := recoverWithin(t, e, p)
			require.Equal(t, []uuid.UUID{id}, res.Pending, "recovery %d", n)
			require.Equal(t, n, get(t, e.db.Pool, id).Recoveries)
		}
		claimOne(t, e, "w")
		expire(t, e.db.Pool, id)
		res := recoverWithin(t, e, p)
		require.Empty(t, res.Pending)
		require.Len(t, res.Failed, 1)
		require.Equal(t, id, res.Failed[0].ID)
		require.Equal(t, "test.event", res.Failed[0].Type)

		r := requireIn(t, e.db.Pool, id, "outbox_events_dead", "FAILED")
		require.Equal(t, string(outbox.CodeWorkerLost), *r.LastErrorCode)
		require.NotNil(t, r.FailedAt)
		require.Zero(t, r.Attempts, "no attempt ever ended")
		requireLeaseCleared(t, r)
		require.Len(t, r.AttemptLog, maxRecoveries+1)
	})

	t.Run("unexpired row is untouched", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 2)
		expired, live := b.Events[0].ID, b.Events[1].ID
		expire(t, e.db.Pool, expired)
		liveBefore := get(t, e.db.Pool, live)
		res := recoverWithin(t, e, defaultRecover)
		require.Equal(t, []uuid.UUID{expired}, res.Pending)
		require.Equal(t, liveBefore, get(t, e.db.Pool, live))
	})
}

func TestRecoverRace(t *testing.T) {
	t.Parallel()

	t.Run("completion holding the row lock stays sent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b, tx := expiredAndTx(t, e, "w")
		id := b.Events[0].ID

		// The worker's completion has updated the row but not committed:
		// the committed version is still an expired PROCESSING row.
		// (Complete itself refuses an expired lease, so the completion is
		// written out; it is what Complete's sent statement does to the
		// row: a move into the SENT history.)
		tag, err := tx.Exec(t.Context(), `WITH m AS (
			DELETE FROM outbox_events WHERE id = $1 AND lock_token = $2 RETURNING id, seq, event_type, headers, attempts, created_at)
			INSERT INTO outbox_events_sent (id, seq, event_type, headers, status, attempts, sent_at, lock_token, outcome_token, created_at)
			SELECT id, seq, event_type, headers, 'SENT', attempts + 1, now(), $2, $2, created_at FROM m`, id, b.Token)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())

		requireNotRecovered(t, e, tx)
		r := requireIn(t, e.db.Pool, id, "outbox_events_sent", "SENT")
		require.Zero(t, r.Recoveries)
	})

	t.Run("fenced completion racing recovery stays sent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 1)
		b := claimOne(t, e, "w")
		id := b.Events[0].ID

		// The real Complete, in a transaction that stays open while the lease
		// runs out in the committed version: the lease passes 300ms after
		// the completion reached the row (its fence reads the clock there).
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events
			SET lease_until = clock_timestamp() + interval '300 milliseconds' WHERE id = $1`, id)
		require.NoError(t, err)
		tx, err := e.db.Pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		res, err := e.store.Complete(t.Context(), tx, lease.CompleteParams{Sent: b.Refs()})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, res.Sent)
		time.Sleep(400 * time.Millisecond)

		// To every other session the committed row is now expired.
		require.True(t, get(t, e.db.Pool, id).LeaseUntil.Before(dbClock(t, e.db.Pool)))
		requireNotRecovered(t, e, tx)
		r := requireIn(t, e.db.Pool, id, "outbox_events_sent", "SENT")
		require.Equal(t, 1, r.Attempts)
		require.Zero(t, r.Recoveries)
	})

	t.Run("row re-claimed concurrently is not recovered", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		old, tx := expiredAndTx(t, e, "crashed")
		id := old.Events[0].ID

		// Another replica recovers the row and claims it again in one
		// transaction, still open: the committed version is the expired
		// PROCESSING row of the crashed worker.
		first, err := e.store.Recover(t.Context(), tx, defaultRecover)
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, first.Pending)
		fresh, err := e.store.Claim(t.Context(), tx, lease.ClaimParams{Owner: "replica", Limit: 1, Lease: time.Hour, Start: 1})
		require.NoError(t, err)
		require.Len(t, fresh.Events, 1)

		requireNotRecovered(t, e, tx)
		r := get(t, e.db.Pool, id)
		require.Equal(t, "PROCESSING", r.Status)
		require.Equal(t, &fresh.Token, r.LockToken)
		require.Equal(t, 1, r.Recoveries)
	})
}
