package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes runs every Store statement in each pgx query exec mode,
// directly and through PgBouncer in transaction mode: their arguments
// must encode in text as well as binary, and their results scan from
// either.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		e := newEnv(t)
		pool := e.db.RoutePool(t, r, 2)
		ids := insert(t, e.db.Pool,
			spec{Type: "a", Payload: []byte(`{"n":1}`), Headers: map[string]string{"h": "v"}, PartitionKey: "p"},
			spec{Type: "b"}, spec{Type: "c"}, spec{Type: "d"})
		late := insert(t, e.db.Pool, spec{DueIn: time.Hour})
		expired := insert(t, e.db.Pool, spec{Status: "PROCESSING"})

		wait, ok, err := e.store.NextDue(ctx, pool, nil)
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, wait, time.Duration(0))
		wait, ok, err = e.store.NextDue(ctx, pool, []string{"b", "c"})
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, wait, time.Duration(0))
		waiting, err := e.store.Waiting(ctx, pool, lease.WaitingParams{Except: []string{"a", "b"}, PerType: 10, MaxTypes: 10})
		require.NoError(t, err)
		require.Equal(t, []lease.TypeCount{{Type: "c", Count: 1}, {Type: "d", Count: 1}}, waiting)
		typed, err := e.store.Claim(ctx, pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, Start: 1, Types: []string{"b"}})
		require.NoError(t, err)
		require.Equal(t, ids[1:2], batchIDs(typed))
		_, err = e.store.Release(ctx, pool, typed.Refs())
		require.NoError(t, err)

		b, err := e.store.Claim(ctx, pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, Start: 1})
		require.NoError(t, err)
		require.Equal(t, ids, batchIDs(b))
		require.Equal(t, []bool{true, false, false, false}, b.Started)
		first := b.Events[0]
		require.Equal(t, "a", first.Type)
		require.Equal(t, []byte(`{"n":1}`), first.Payload)
		require.Equal(t, map[string]string{"h": "v"}, first.Headers)
		require.Equal(t, "p", first.PartitionKey)
		require.Equal(t, 1, first.Attempt)
		refs := b.Refs()

		res, err := e.store.Start(ctx, pool, refs[1:3], true) // lazy: its settings go through every exec mode too
		require.NoError(t, err)
		require.ElementsMatch(t, refs[1:3], res.Done)

		res, err = e.store.Renew(ctx, pool, refs, time.Hour)
		require.NoError(t, err)
		require.ElementsMatch(t, refs, res.Done)
		res, err = e.store.RenewIn(ctx, pool, refs, time.Hour, 1) // a statement per row, in one round trip
		require.NoError(t, err)
		require.ElementsMatch(t, refs, res.Done)

		res, err = e.store.Release(ctx, pool, refs[3:])
		require.NoError(t, err)
		require.Equal(t, refs[3:], res.Done)

		done, err := e.store.Complete(ctx, pool, lease.CompleteParams{
			Sent: refs[:1],
			Failed: []lease.Failure{
				{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "try again", Delay: time.Hour},
				{Ref: refs[2], Code: outbox.CodeHandlerError, Message: "no more", Final: true},
			},
		})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ids[0]}, done.Sent)
		require.Len(t, done.Retried, 1)
		require.Equal(t, ids[1], done.Retried[0].ID)
		require.Equal(t, []lease.Dead{{ID: ids[2], Attempts: 1}}, done.Failed)
		require.Empty(t, done.Lost)

		out, unknown, err := e.store.Outcomes(ctx, pool, lease.CompleteParams{
			Sent:   refs[:1],
			Failed: []lease.Failure{{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "try again", Delay: time.Hour}},
		})
		require.NoError(t, err)
		require.Empty(t, unknown)
		require.Equal(t, []uuid.UUID{ids[0]}, out.Sent)
		require.Equal(t, done.Retried, out.Retried)

		again, err := e.store.Claim(ctx, pool, lease.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, ids[3:4], batchIDs(again))
		recorded, err := e.store.Refused(ctx, pool, again.Refs()[0], "refused")
		require.NoError(t, err)
		require.True(t, recorded)

		access, err := e.store.Access(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, lease.Access{Select: true, Update: true, Delete: true, Isolation: "read committed",
			Dead: lease.TableAccess{Insert: true, Select: true, Update: true}, Sent: lease.TableAccess{Insert: true, Select: true}}, access)

		rec, err := e.store.Recover(ctx, pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 3})
		require.NoError(t, err)
		require.Equal(t, expired, rec.Pending)

		require.Equal(t, "PENDING", get(t, e.db.Pool, late[0]).Status)
		for status, n := range map[string]int{"PENDING": 3, "PROCESSING": 0, "SENT": 1, "FAILED": 2} {
			require.Equal(t, n, countStatus(t, e.db.Pool, status), status)
		}
	})
}
