package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// startedAt reports whether the row's started_at is set.
func startedAt(t *testing.T, e env, b lease.Batch) []bool {
	t.Helper()
	out := make([]bool, len(b.Events))
	for i, ev := range b.Events {
		require.NoError(t, e.db.Pool.QueryRow(t.Context(),
			`SELECT started_at IS NOT NULL FROM outbox_events WHERE id = $1`, ev.ID).Scan(&out[i]))
	}
	return out
}

// Only rows whose attempt started spend the poison budget: rows claimed
// ahead and never started come back as they were.
func TestRecoverChargesOnlyStartedRows(t *testing.T) {
	t.Parallel()

	t.Run("claim marks the first Start rows in claim order", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insert(t, e.db.Pool, spec{DueIn: -time.Hour}, spec{DueIn: -time.Minute}, spec{}, spec{})
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 4, Lease: time.Hour, Start: 2})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, false, false}, b.Started)
		require.Equal(t, b.Started, startedAt(t, e, b))
	})

	t.Run("no claim marks a suspect", func(t *testing.T) {
		t.Parallel()
		// Each form of the claim (none, some, all marked), of every type
		// and of some types: the typed claim takes the rows of types x and
		// y, mixed in due order, and leaves z.
		for _, types := range [][]string{nil, {"x", "y"}} {
			for _, start := range []int{0, 2, 4} {
				e := newEnv(t)
				ids := insert(t, e.db.Pool, spec{Type: "x", DueIn: -time.Hour}, spec{Type: "z", DueIn: -2 * time.Minute},
					spec{Type: "y", DueIn: -time.Minute}, spec{Type: "x", DueIn: -time.Second}, spec{Type: "y"})
				_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET recoveries = 1 WHERE id = ANY($1)`, []uuid.UUID{ids[0], ids[3]})
				require.NoError(t, err)
				b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 4, Lease: time.Hour, Start: start, Types: types})
				require.NoError(t, err)
				msg := fmt.Sprintf("types %v, start %d", types, start)
				if types == nil {
					require.Equal(t, ids[:4], batchIDs(b), msg)
					require.Equal(t, []bool{true, false, false, true}, b.Suspect, msg)
				} else {
					require.Equal(t, []uuid.UUID{ids[0], ids[2], ids[3], ids[4]}, batchIDs(b), msg)
					require.Equal(t, []bool{true, false, true, false}, b.Suspect, msg)
				}
				want := make([]bool, 4)
				for i := range want {
					want[i] = i < start && !b.Suspect[i]
				}
				require.Equal(t, want, b.Started, msg)
				require.Equal(t, want, startedAt(t, e, b), msg)
			}
		}
	})

	t.Run("unstarted rows return uncharged, keeping their due time", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insert(t, e.db.Pool, spec{DueIn: -time.Hour}, spec{DueIn: -time.Minute}, spec{})
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 3, Lease: time.Hour, Start: 1})
		require.NoError(t, err)
		before := []row{get(t, e.db.Pool, b.Events[1].ID), get(t, e.db.Pool, b.Events[2].ID)}
		for _, ev := range b.Events {
			expire(t, e.db.Pool, ev.ID)
		}
		res, err := e.store.Recover(t.Context(), e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 0})
		require.NoError(t, err)
		require.Len(t, res.Failed, 1, "the started row is past a cap of 0")
		require.Equal(t, b.Events[0].ID, res.Failed[0].ID)
		require.ElementsMatch(t, []any{b.Events[1].ID, b.Events[2].ID}, []any{res.Pending[0], res.Pending[1]})
		for i, ev := range b.Events[1:] {
			r := get(t, e.db.Pool, ev.ID)
			require.Equal(t, "PENDING", r.Status)
			require.Zero(t, r.Recoveries)
			require.True(t, r.NextAttemptAt.Equal(before[i].NextAttemptAt), "due time kept")
			require.Nil(t, r.LastErrorCode)
			require.Empty(t, r.AttemptLog)
			requireLeaseCleared(t, r)
		}
		dead := get(t, e.db.Pool, b.Events[0].ID)
		require.Equal(t, "FAILED", dead.Status)
		require.Equal(t, 1, dead.Recoveries)
		require.Equal(t, "worker_lost", *dead.LastErrorCode)
	})

	t.Run("at most once fails only started rows", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 2)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 2, Lease: time.Hour, Start: 1})
		require.NoError(t, err)
		for _, ev := range b.Events {
			expire(t, e.db.Pool, ev.ID)
		}
		res, err := e.store.Recover(t.Context(), e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 3, AtMostOnce: true})
		require.NoError(t, err)
		require.Len(t, res.Failed, 1)
		require.Equal(t, b.Events[0].ID, res.Failed[0].ID)
		require.Len(t, res.Pending, 1)
		require.Equal(t, b.Events[1].ID, res.Pending[0])
	})

	t.Run("Start marks held rows, and only those", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 4)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 4, Lease: time.Hour})
		require.NoError(t, err)
		refs := b.Refs()
		expire(t, e.db.Pool, refs[2].ID)
		lockRow(t, e, refs[3].ID)
		res, err := e.store.Start(t.Context(), e.db.Pool, refs, false)
		require.NoError(t, err)
		require.ElementsMatch(t, refs[:2], res.Done)
		require.Equal(t, []lease.Ref{refs[3]}, res.Busy)
		require.Equal(t, []bool{true, true, false, false}, startedAt(t, e, b))

		expire(t, e.db.Pool, refs[0].ID)
		rec, err := e.store.Recover(t.Context(), e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 0})
		require.NoError(t, err)
		require.Len(t, rec.Failed, 1)
		require.Equal(t, refs[0].ID, rec.Failed[0].ID)
		require.Equal(t, 0, get(t, e.db.Pool, refs[2].ID).Recoveries, "expired before it started: uncharged")
	})
}
