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

// lockRow holds a row lock on id from a third connection until the
// returned function commits it.
func lockRow(t *testing.T, e env, id uuid.UUID) (commit func()) {
	t.Helper()
	tx, err := e.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	done := false
	commit = func() {
		if !done {
			done = true
			require.NoError(t, tx.Commit(context.Background()))
		}
	}
	t.Cleanup(commit)
	return commit
}

// deadlocks returns the server's count of deadlocks in this database.
func deadlocks(t *testing.T, e env) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// waitingOnLock reports whether a backend whose query starts with prefix
// waits for a lock.
func waitingOnLock(t *testing.T, e env, query string) bool {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, query).Scan(&n))
	return n > 0
}

// The interleaving that made the heartbeat and the completer deadlock each
// other: a third session X holds b2; Renew(B, A) locks b1 and waits on b2;
// Complete(A, B) locks a1 and waits on b1; X commits; Renew then waits on
// a1. Renew now skips a row that is locked elsewhere instead of waiting
// for it, so there is no cycle: both calls succeed and b2 is reported
// busy, not lost.
func TestRenewAndCompleteDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	insertDue(t, e.db.Pool, 1)
	a := claimN(t, e, 1)
	insertDue(t, e.db.Pool, 2)
	b := claimN(t, e, 2)
	before := deadlocks(t, e)
	commitX := lockRow(t, e, b.Events[1].ID)

	type renewResult struct {
		res lease.RefResult
		err error
	}
	renewed := make(chan renewResult, 1)
	go func() {
		res, err := e.store.Renew(context.Background(), e.db.Pool, append(b.Refs(), a.Refs()...), time.Hour)
		renewed <- renewResult{res, err}
	}()
	var r renewResult
	budget := testctx.New(t) // the lock is held until the test ends: a Renew that waits for it never returns
	select {
	case r = <-renewed:
	case <-budget.Done():
		t.Fatal("Renew waited for a row lock held elsewhere")
	}
	require.NoError(t, r.err)
	require.ElementsMatch(t, []lease.Ref{b.Refs()[0], a.Refs()[0]}, r.res.Done)
	require.Equal(t, []lease.Ref{b.Refs()[1]}, r.res.Busy)

	completed := make(chan error, 1)
	go func() {
		res, err := e.store.Complete(context.Background(), e.db.Pool,
			lease.CompleteParams{Sent: append(a.Refs(), b.Refs()...)})
		if err == nil && len(res.Sent) != 3 {
			err = errUnexpected(res)
		}
		completed <- err
	}()
	// The success deletes its rows from this test's table (the server's
	// other sessions are other tests'), within the first kilobyte of the
	// statement that pg_stat_activity shows.
	sent := "DELETE FROM " + pgx.Identifier{e.db.Schema, "outbox_events"}.Sanitize()
	waitUntil(t, "Complete to wait for X's lock", func() bool { return waitingOnLock(t, e, sent) })
	commitX()
	require.NoError(t, <-completed)
	require.Equal(t, before, deadlocks(t, e), "the server detected a deadlock")
}

// Release, too, skips rows locked elsewhere and reports them busy.
func TestReleaseSkipsBusyRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	insertDue(t, e.db.Pool, 2)
	b := claimN(t, e, 2)
	lockRow(t, e, b.Events[0].ID)
	res, err := e.store.Release(testctx.New(t), e.db.Pool, b.Refs())
	require.NoError(t, err)
	require.Equal(t, []lease.Ref{b.Refs()[1]}, res.Done)
	require.Equal(t, []lease.Ref{b.Refs()[0]}, res.Busy)
	require.Equal(t, "PROCESSING", get(t, e.db.Pool, b.Events[0].ID).Status)
	require.Equal(t, "PENDING", get(t, e.db.Pool, b.Events[1].ID).Status)
}

// Outcomes, read back after a completion whose reply was lost, sorts each
// outcome asked for by the decision table of the package doc ("Lost
// replies"): recorded by this claim whatever claimed or completed the row
// since, as far as the row can tell (its outcome token, or the token in
// its attempt-log entry); lost when the row proves the lease was lost
// first (still held under the token past its lease, recovered, or a
// success that the row does not show); unknown otherwise.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	var p lease.CompleteParams
	want := lease.CompleteResult{}
	var wantUnknown []uuid.UUID
	// claim claims a fresh row under a token of its own.
	claim := func() lease.Ref {
		insertDue(t, e.db.Pool, 1)
		return claimOne(t, e, "worker-a").Refs()[0]
	}
	complete := func(p lease.CompleteParams) lease.CompleteResult {
		res, err := e.store.Complete(ctx, e.db.Pool, p)
		require.NoError(t, err)
		require.Empty(t, res.Lost)
		return res
	}
	// another claims the one due row and, when send, sends it.
	another := func(send bool) {
		b := claimOne(t, e, "worker-b")
		if send {
			complete(lease.CompleteParams{Sent: b.Refs()})
		}
	}
	retry := func(r lease.Ref) lease.Failure {
		return lease.Failure{Ref: r, Code: outbox.CodeHandlerError, Message: "x"}
	}
	snooze := func(r lease.Ref) lease.Failure { return lease.Failure{Ref: r, Snooze: true} }

	// Recorded: SENT.
	r := claim()
	complete(lease.CompleteParams{Sent: []lease.Ref{r}})
	p.Sent, want.Sent = append(p.Sent, r), append(want.Sent, r.ID)

	// A retry and a snooze, claimed since by another: the outcome token.
	for _, f := range []lease.Failure{retry(claim()), snooze(claim())} {
		res := complete(lease.CompleteParams{Failed: []lease.Failure{f}})
		another(false)
		p.Failed, want.Retried = append(p.Failed, f), append(want.Retried, res.Retried...)
	}

	// A retry, claimed and sent since by another: the attempt-log entry.
	f := retry(claim())
	res := complete(lease.CompleteParams{Failed: []lease.Failure{f}})
	another(true)
	p.Failed, want.Retried = append(p.Failed, f), append(want.Retried, res.Retried...)

	// FAILED: the dead letter's outcome token.
	f = retry(claim())
	f.Final = true
	res = complete(lease.CompleteParams{Failed: []lease.Failure{f}})
	p.Failed, want.Failed = append(p.Failed, f), append(want.Failed, res.Failed...)

	// FAILED, replayed by an operator (moved back, keeping its log),
	// then claimed and sent by another: the SENT row's attempt-log entry.
	f = retry(claim())
	f.Final = true
	res = complete(lease.CompleteParams{Failed: []lease.Failure{f}})
	_, err := e.db.Pool.Exec(ctx, `WITH m AS (DELETE FROM outbox_events_dead WHERE id = $1 RETURNING *)
		INSERT INTO outbox_events (id, seq, event_type, headers, status, attempts, next_attempt_at, attempt_log,
			lock_owner, locked_at, outcome_token, created_at)
		OVERRIDING SYSTEM VALUE
		SELECT id, seq, event_type, headers, 'PENDING', 0, now(), attempt_log, lock_owner, locked_at, outcome_token, created_at FROM m`, f.ID)
	require.NoError(t, err)
	another(true)
	p.Failed, want.Failed = append(p.Failed, f), append(want.Failed, res.Failed...)

	// Recovered past the cap into the dead letters: the recovery's
	// attempt-log entry there names the token.
	r = claim()
	expireLease(t, e, r.ID)
	rec, err := e.store.Recover(ctx, e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 0})
	require.NoError(t, err)
	require.Len(t, rec.Failed, 1)
	p.Failed, want.Lost = append(p.Failed, retry(r)), append(want.Lost, r.ID)

	// A snooze, claimed and sent since by another: nothing left to tell.
	f = snooze(claim())
	complete(lease.CompleteParams{Failed: []lease.Failure{f}})
	another(true)
	p.Failed, wantUnknown = append(p.Failed, f), append(wantUnknown, f.ID)

	// Recovered (its lease expired), then claimed and sent by another:
	// the recovery's attempt-log entry names the token.
	r = claim()
	expireLease(t, e, r.ID)
	_, err = e.store.Recover(ctx, e.db.Pool, lease.RecoverParams{Limit: 10, MaxRecoveries: 3})
	require.NoError(t, err)
	another(true)
	require.Equal(t, "outbox_events_sent", tableOf(t, e.db.Pool, r.ID))
	p.Failed, want.Lost = append(p.Failed, retry(r)), append(want.Lost, r.ID)

	// Released, then claimed and sent by another: a success would show
	// its own outcome token for good, a failure could have been replaced.
	for _, success := range []bool{true, false} {
		r = claim()
		_, err = e.store.Release(ctx, e.db.Pool, []lease.Ref{r})
		require.NoError(t, err)
		another(true)
		if success {
			p.Sent, want.Lost = append(p.Sent, r), append(want.Lost, r.ID)
		} else {
			p.Failed, wantUnknown = append(p.Failed, retry(r)), append(wantUnknown, r.ID)
		}
	}

	// Still held under the token, its lease passed.
	r = claim()
	expireLease(t, e, r.ID)
	p.Failed, want.Lost = append(p.Failed, snooze(r)), append(want.Lost, r.ID)

	// No row.
	r = lease.Ref{ID: uuid.New(), Token: r.Token}
	p.Sent, wantUnknown = append(p.Sent, r), append(wantUnknown, r.ID)

	for _, id := range want.Sent {
		require.Equal(t, "outbox_events_sent", tableOf(t, e.db.Pool, id))
	}
	for _, d := range want.Failed[:1] {
		require.Equal(t, "outbox_events_dead", tableOf(t, e.db.Pool, d.ID))
	}

	got, unknown, err := e.store.Outcomes(ctx, e.db.Pool, p)
	require.NoError(t, err)
	require.ElementsMatch(t, want.Sent, got.Sent)
	require.ElementsMatch(t, want.Retried, got.Retried, "the attempts and due times the writes returned")
	require.ElementsMatch(t, want.Failed, got.Failed)
	require.ElementsMatch(t, want.Lost, got.Lost)
	ids := make([]uuid.UUID, len(unknown))
	for i, u := range unknown {
		ids[i] = u.ID
	}
	require.ElementsMatch(t, wantUnknown, ids)
}

// expireLease moves the lease of row id into the past.
func expireLease(t *testing.T, e env, id uuid.UUID) {
	t.Helper()
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

// A completion statement that reaches a row after its lease passed does
// not touch it, even when the lease was unexpired when its transaction
// began: the expiry test reads the clock at the row.
func TestCompleteFenceReadsTheClockAtTheRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	insertDue(t, e.db.Pool, 1)
	b := claimN(t, e, 1)
	_, err := e.db.Pool.Exec(t.Context(),
		`UPDATE outbox_events SET lease_until = clock_timestamp() + interval '300 milliseconds' WHERE id = $1`, b.Events[0].ID)
	require.NoError(t, err)
	err = pgx.BeginFunc(t.Context(), e.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `SELECT pg_sleep(0.5)`); err != nil {
			return err
		}
		res, err := e.store.Complete(t.Context(), tx, lease.CompleteParams{Sent: b.Refs()})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{b.Events[0].ID}, res.Lost)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "PROCESSING", get(t, e.db.Pool, b.Events[0].ID).Status)
}

type errUnexpectedResult lease.CompleteResult

func (e errUnexpectedResult) Error() string { return "unexpected completion result" }

func errUnexpected(res lease.CompleteResult) error { return errUnexpectedResult(res) }

// waitUntil polls cond until it holds, failing the test if the run's
// -timeout comes first (testctx.Await).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testctx.Await(t, what, cond)
}

// A completion bounded by StatementTimeout gives up on the server, not
// only on the client: it cannot wait on beside a retry of it.
func TestCompleteStatementTimeoutBindsTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := claimN(t, e, 1)
	lockRow(t, e, b.Events[0].ID)
	start := time.Now()
	_, err := e.store.Complete(context.Background(), e.db.Pool,
		lease.CompleteParams{Sent: b.Refs(), StatementTimeout: 200 * time.Millisecond})
	require.ErrorContains(t, err, "57014")
	require.Less(t, time.Since(start), 5*time.Second)

	var after string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SHOW statement_timeout`).Scan(&after))
	require.Equal(t, "0", after, "the bound ends with the write's transaction")
}
