package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// moved is what a move must keep of a row: its identity and its event.
type moved struct {
	Seq       int64
	Payload   []byte
	Headers   map[string]string
	CreatedAt time.Time
	LockOwner *string
	LockedAt  *time.Time
}

func movedOf(r row) moved {
	return moved{r.Seq, r.Payload, r.Headers, r.CreatedAt, r.LockOwner, r.LockedAt}
}

// outcomeToken reads the row's outcome_token, wherever it is.
func outcomeToken(t *testing.T, db lease.DB, id uuid.UUID) *uuid.UUID {
	t.Helper()
	var token *uuid.UUID
	require.NoError(t, queryRow(db, `SELECT outcome_token FROM outbox_events WHERE id = $1
		UNION ALL SELECT outcome_token FROM outbox_events_dead WHERE id = $1
		UNION ALL SELECT outcome_token FROM outbox_events_sent WHERE id = $1`, id).Scan(&token))
	return token
}

// A success moves its row from the outbox table into the SENT history,
// with every column it had but the outcome's (SENT, sent_at now, one more
// attempt, the lease ended, its token kept and recorded as the outcome
// token); with DeleteSent it leaves no row anywhere.
func TestSuccessMovesToTheHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	insert(t, e.db.Pool, spec{Payload: []byte("p"), Headers: map[string]string{"h": "v"}}, spec{})
	b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "worker-a", Limit: 2, Lease: time.Hour, Start: 2})
	require.NoError(t, err)
	held := get(t, e.db.Pool, b.Events[0].ID)
	before := dbClock(t, e.db.Pool)
	res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: b.Refs()[:1]})
	require.NoError(t, err)
	after := dbClock(t, e.db.Pool)
	require.Equal(t, []uuid.UUID{b.Events[0].ID}, res.Sent)

	r := requireIn(t, e.db.Pool, b.Events[0].ID, "outbox_events_sent", "SENT")
	require.Equal(t, movedOf(held), movedOf(r))
	require.Equal(t, 1, r.Attempts)
	between(t, *r.SentAt, before, after, "sent_at")
	require.Nil(t, r.FailedAt)
	requireLeaseEnded(t, r, &b.Token)
	require.Equal(t, &b.Token, outcomeToken(t, e.db.Pool, r.ID))
	var partition string
	require.NoError(t, queryRow(e.db.Pool, `SELECT tableoid::regclass::text FROM outbox_events_sent WHERE id = $1`, r.ID).Scan(&partition))
	require.Equal(t, "outbox_events_sent_default", partition, "no time partition exists yet")

	res, err = e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: b.Refs()[1:], DeleteSent: true})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b.Events[1].ID}, res.Sent)
	require.Empty(t, tableOf(t, e.db.Pool, b.Events[1].ID))
}

// A final failure, a recovery past the cap and a refused outcome move
// their rows into the dead letters, with the columns of the outcome;
// retries and snoozes stay in the outbox table.
func TestFailedMovesToTheDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := insertDue(t, e.db.Pool, 5)
	b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "worker-a", Limit: 5, Lease: time.Hour, Start: 5})
	require.NoError(t, err)
	refs := b.Refs()
	held := get(t, e.db.Pool, ids[0])
	before := dbClock(t, e.db.Pool)
	res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{
		{Ref: refs[0], Code: outbox.CodeHandlerError, Message: "no more", Final: true},
		{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "again", Delay: time.Hour},
		{Ref: refs[2], Snooze: true, Delay: time.Hour},
	}})
	require.NoError(t, err)
	after := dbClock(t, e.db.Pool)
	require.Equal(t, []lease.Dead{{ID: ids[0], Attempts: 1}}, res.Failed)
	require.Len(t, res.Retried, 2)

	r := requireIn(t, e.db.Pool, ids[0], "outbox_events_dead", "FAILED")
	require.Equal(t, movedOf(held), movedOf(r))
	require.Equal(t, 1, r.Attempts)
	between(t, *r.FailedAt, before, after, "failed_at")
	require.Equal(t, "no more", *r.LastError)
	require.Equal(t, string(outbox.CodeHandlerError), *r.LastErrorCode)
	require.Equal(t, "failed", lastLog(t, r).Outcome)
	requireLeaseEnded(t, r, &b.Token)
	require.Equal(t, &b.Token, outcomeToken(t, e.db.Pool, ids[0]))
	requireIn(t, e.db.Pool, ids[1], "outbox_events", "PENDING")
	requireIn(t, e.db.Pool, ids[2], "outbox_events", "PENDING")

	expire(t, e.db.Pool, ids[3])
	rec, err := e.store.Recover(t.Context(), e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 0})
	require.NoError(t, err)
	require.Len(t, rec.Failed, 1)
	require.Equal(t, ids[3], rec.Failed[0].ID)
	r = requireIn(t, e.db.Pool, ids[3], "outbox_events_dead", "FAILED")
	require.Equal(t, string(outbox.CodeWorkerLost), *r.LastErrorCode)
	require.Equal(t, 1, r.Recoveries)
	requireLeaseCleared(t, r)
	require.Nil(t, outcomeToken(t, e.db.Pool, ids[3]), "a recovery records no outcome of the claim")

	ok, err := e.store.Refused(t.Context(), e.db.Pool, refs[4], "refused: a trigger")
	require.NoError(t, err)
	require.True(t, ok)
	r = requireIn(t, e.db.Pool, ids[4], "outbox_events_dead", "FAILED")
	require.Equal(t, string(outbox.CodeOutcomeRefused), *r.LastErrorCode)
	require.Zero(t, r.Attempts, "a refused outcome spends no attempt")
	require.Equal(t, &b.Token, outcomeToken(t, e.db.Pool, ids[4]))
}

// When the database refuses the move of a refused outcome too (here a
// trigger that refuses every DELETE of the outbox table), Refused writes
// it in place: a FAILED stray in the outbox table, which the retention
// pass moves.
func TestRefusedFallsBackToAnUpdateInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := claimN(t, e, 1)
	_, err := e.db.Pool.Exec(t.Context(), `CREATE FUNCTION no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'no delete'; END $$;
		CREATE TRIGGER no_delete BEFORE DELETE ON outbox_events FOR EACH ROW EXECUTE FUNCTION no_delete()`)
	require.NoError(t, err)
	ok, err := e.store.Refused(t.Context(), e.db.Pool, b.Refs()[0], "refused")
	require.NoError(t, err)
	require.True(t, ok)
	r := requireIn(t, e.db.Pool, b.Events[0].ID, "outbox_events", "FAILED")
	require.Equal(t, string(outbox.CodeOutcomeRefused), *r.LastErrorCode)
	requireLeaseEnded(t, r, &b.Token)
}

// Under BlockFailed a dead letter that no operator skipped ends its
// key's run: a key whose earlier event was replayed (PENDING again)
// while a later one is dead is claimed up to the dead letter only. A
// skipped dead letter, or the SkipFailed policy, lets the run go on.
func TestOrderedClaimStopsAtADeadLetter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		blockFailed, skip bool
		want              int
	}{
		{"BlockKey", true, false, 1},
		{"BlockKey, skipped", true, true, 2},
		{"SkipFailed", false, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forEachForm(t, func(t *testing.T, e oenv, types []string) {
				ids := insert(t, e.db.Pool, keyed("k"), spec{Status: "FAILED", PartitionKey: "k"}, keyed("k"))
				if c.skip {
					_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events_dead SET skipped_at = now() WHERE id = $1`, ids[1])
					require.NoError(t, err)
				}
				b := claimOrdered(t, e, e.db.Pool, types, 10, c.blockFailed)
				require.Equal(t, []uuid.UUID{ids[0], ids[2]}[:c.want], batchIDs(b))
				if c.want == 1 {
					require.Equal(t, "PENDING", get(t, e.db.Pool, ids[2]).Status, "the row after the dead letter waits")
				}
			})
		})
	}
}

// A heartbeat renewal changes no indexed column of the outbox table
// (schema version 11): every renewed row is a HOT update, which adds no
// index entry. Counted in the renewal's own transaction
// (pg_stat_get_xact_*, before and after: on PostgreSQL 15 they also hold
// the session's counts not yet flushed), so that other sessions'
// statistics and their flushes do not matter.
func TestRenewalIsAHotUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := claimN(t, e, 10) // a few rows: their page keeps room for new versions (fillfactor 80)
	var indexed bool
	require.NoError(t, queryRow(e.db.Pool, `SELECT EXISTS (
		SELECT FROM pg_index AS i, pg_attribute AS a
		WHERE i.indrelid = 'outbox_events'::regclass AND a.attrelid = i.indrelid
			AND a.attname IN ('lease_until', 'heartbeat_at', 'started_at')
			AND (a.attnum = ANY (i.indkey) OR pg_get_expr(i.indexprs, i.indrelid) LIKE '%' || a.attname || '%'
				OR pg_get_expr(i.indpred, i.indrelid) LIKE '%' || a.attname || '%'))`).Scan(&indexed))
	require.False(t, indexed, "an index holds a column that a renewal or Start writes")

	err := pgx.BeginFunc(t.Context(), e.db.Pool, func(tx pgx.Tx) error {
		counts := func() (updated, hot int) {
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_stat_get_xact_tuples_updated('outbox_events'::regclass),
			pg_stat_get_xact_tuples_hot_updated('outbox_events'::regclass)`).Scan(&updated, &hot))
			return updated, hot
		}
		updated0, hot0 := counts()
		res, err := e.store.Renew(t.Context(), tx, b.Refs(), time.Hour)
		require.NoError(t, err)
		require.Len(t, res.Done, 10)
		started, err := e.store.Start(t.Context(), tx, b.Refs(), false)
		require.NoError(t, err)
		require.Len(t, started.Done, 10)
		updated, hot := counts()
		require.Equal(t, 20, updated-updated0)
		require.Equal(t, 20, hot-hot0, "every renewal and start mark is a HOT update")
		return nil
	})
	require.NoError(t, err)
}

// The role the dispatcher runs as needs, besides SELECT (ReadColumns),
// UPDATE (WrittenColumns) and DELETE on the outbox table, INSERT
// (MovedColumns) and SELECT (DeadReadColumns, SentReadColumns) on the
// dead letters and the SENT history: with exactly these column grants
// every statement runs, and Access reports them held.
func TestColumnGrantsAreEnough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.KeyOrder)
	ctx := context.Background()
	role := e.db.NewRole(t, "pgotest_lease_columns")
	quoted := pgx.Identifier{role}.Sanitize()
	cols := func(c []string) string { return strings.Join(c, ", ") }
	_, err := e.db.Pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+pgx.Identifier{e.db.Schema}.Sanitize()+` TO `+quoted+`;
		GRANT SELECT (`+cols(lease.ReadColumns)+`), UPDATE (`+cols(lease.WrittenColumns)+`), DELETE ON outbox_events TO `+quoted+`;
		GRANT INSERT (`+cols(lease.MovedColumns)+`), UPDATE (`+cols(lease.MovedColumns)+`), SELECT (`+cols(lease.DeadReadColumns)+`)
			ON outbox_events_dead TO `+quoted+`;
		GRANT INSERT (`+cols(lease.MovedColumns)+`), SELECT (`+cols(lease.SentReadColumns)+`) ON outbox_events_sent TO `+quoted)
	require.NoError(t, err)
	conn := e.db.RoleConn(t, role)

	access, err := e.store.Access(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, lease.Access{Select: true, Update: true, Delete: true, Isolation: "read committed",
		Dead: lease.TableAccess{Insert: true, Select: true, Update: true}, Sent: lease.TableAccess{Insert: true, Select: true}}, access)
	require.NoError(t, e.store.CheckColumns(ctx, conn))

	ids := insert(t, e.db.Pool, keyed("k"), keyed("k"), spec{}, spec{}, spec{}, spec{Status: "FAILED", PartitionKey: "j"}, keyed("j"))
	for _, types := range [][]string{nil, {"test.event"}} {
		b, err := e.store.Claim(ctx, conn, lease.ClaimParams{Owner: "w", Limit: 1, Lease: time.Hour, Types: types, Ordered: true, BlockFailed: true})
		require.NoError(t, err)
		_, err = e.store.Release(ctx, conn, b.Refs())
		require.NoError(t, err)
	}
	b, err := e.store.Claim(ctx, conn, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Hour, Start: 10, Types: []string{"test.event"}})
	require.NoError(t, err)
	require.Len(t, b.Events, len(ids)-1, "the unordered claim takes j's row behind its dead letter too")
	refs := b.Refs()
	res, err := e.store.Complete(ctx, conn, lease.CompleteParams{Sent: refs[:1], Failed: []lease.Failure{
		{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "x", Final: true},
		{Ref: refs[2], Code: outbox.CodeHandlerError, Message: "x", Delay: time.Hour},
	}})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
	_, unknown, err := e.store.Outcomes(ctx, conn, lease.CompleteParams{Sent: refs[:1], Failed: []lease.Failure{
		{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "x", Final: true},
	}})
	require.NoError(t, err)
	require.Empty(t, unknown)
	ok, err := e.store.Refused(ctx, conn, refs[3], "refused")
	require.NoError(t, err)
	require.True(t, ok)
	requireIn(t, e.db.Pool, refs[3].ID, "outbox_events_dead", "FAILED")
	expire(t, e.db.Pool, refs[4].ID)
	rec, err := e.store.Recover(ctx, conn, lease.RecoverParams{Limit: 10, MaxRecoveries: 0})
	require.NoError(t, err)
	require.Len(t, rec.Failed, 1)
	_, _, err = e.store.NextDue(ctx, conn, []string{"test.event"})
	require.NoError(t, err)
	_, _, err = e.store.NextHeadDue(ctx, conn, []string{"test.event"}, true, true)
	require.NoError(t, err)
	_, err = e.store.Waiting(ctx, conn, lease.WaitingParams{Except: []string{"x"}, PerType: 10, MaxTypes: 10})
	require.NoError(t, err)
}
