package lease_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// requireLeaseCleared checks that a row left PROCESSING without a lease
// and without a token (recovery, release).
func requireLeaseCleared(t *testing.T, r row) {
	t.Helper()
	requireLeaseEnded(t, r, nil)
}

// requireLeaseEnded checks that a row left PROCESSING without a lease,
// keeping token: the claim whose outcome it holds (nil for none).
func requireLeaseEnded(t *testing.T, r row, token *uuid.UUID) {
	t.Helper()
	require.Equal(t, token, r.LockToken, "lock_token")
	require.Nil(t, r.LeaseUntil, "lease_until")
	require.Nil(t, r.HeartbeatAt, "heartbeat_at")
}

// lastLog returns the newest attempt-log entry of the row.
func lastLog(t *testing.T, r row) logEntry {
	t.Helper()
	require.NotEmpty(t, r.AttemptLog)
	return r.AttemptLog[len(r.AttemptLog)-1]
}

func TestComplete(t *testing.T) {
	t.Parallel()

	t.Run("attempt log keeps the latest ten", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := insertDue(t, e.db.Pool, 1)[0]
		const cycles = 12
		starts := make([]time.Time, cycles+1)
		for n := 1; n <= cycles; n++ {
			b := claimOne(t, e, fmt.Sprintf("worker-%d", n))
			require.Equal(t, n, b.Events[0].Attempt)
			starts[n] = *get(t, e.db.Pool, id).LockedAt
			res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{{
				Ref: b.Refs()[0], Code: outbox.CodeHandlerError, Message: fmt.Sprintf("failure %d", n),
				Final: n == cycles, // Delay 0: due again at once.
			}}})
			require.NoError(t, err)
			require.Empty(t, res.Lost)
		}

		r := requireIn(t, e.db.Pool, id, "outbox_events_dead", "FAILED")
		require.Equal(t, cycles, r.Attempts)
		require.Len(t, r.AttemptLog, 10)
		for i, entry := range r.AttemptLog {
			n := cycles - 10 + 1 + i // oldest kept is attempt 3, newest last
			outcome := "retry"
			if n == cycles {
				outcome = "failed"
			}
			require.Equal(t, n, entry.Attempt, "entry %d", i)
			require.Equal(t, outcome, entry.Outcome, "entry %d", i)
			require.Equal(t, string(outbox.CodeHandlerError), *entry.Code, "entry %d", i)
			require.Equal(t, fmt.Sprintf("failure %d", n), *entry.Message, "entry %d", i)
			require.Equal(t, fmt.Sprintf("worker-%d", n), entry.Owner, "entry %d", i)
			require.True(t, entry.Started.Equal(starts[n]), "entry %d started %v, locked_at was %v", i, entry.Started, starts[n])
			require.False(t, entry.Ended.Before(entry.Started), "entry %d ended before it started", i)
			if i > 0 {
				require.False(t, entry.Started.Before(r.AttemptLog[i-1].Ended), "entry %d is older than entry %d", i, i-1)
			}
		}
	})

	t.Run("delete sent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 3)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: b.Refs()[:2], DeleteSent: true})
		require.NoError(t, err)
		require.ElementsMatch(t, batchIDs(b)[:2], res.Sent)
		require.Empty(t, res.Lost)
		require.Empty(t, tableOf(t, e.db.Pool, b.Events[0].ID), "deleted, not moved")
		require.Empty(t, tableOf(t, e.db.Pool, b.Events[1].ID), "deleted, not moved")
		require.Equal(t, "PROCESSING", get(t, e.db.Pool, b.Events[2].ID).Status)
	})

	t.Run("empty params", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		pool, tr := tracedPool(t, e.db)
		res, err := e.store.Complete(t.Context(), pool, lease.CompleteParams{})
		require.NoError(t, err)
		require.Equal(t, lease.CompleteResult{}, res)
		queries, batches, _ := tr.counts()
		require.Zero(t, queries+batches, "nothing to record needs no round trip")
	})

	t.Run("final failure", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 1)
		id := b.Events[0].ID
		due := get(t, e.db.Pool, id).NextAttemptAt
		before := dbClock(t, e.db.Pool)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{{
			Ref: b.Refs()[0], Code: outbox.CodeNoHandler, Message: "no handler for test.event", Final: true, Delay: time.Hour,
		}}})
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.Equal(t, lease.CompleteResult{Failed: []lease.Dead{{ID: id, Attempts: 1}}}, res)

		r := requireIn(t, e.db.Pool, id, "outbox_events_dead", "FAILED")
		require.Equal(t, 1, r.Attempts)
		require.NotNil(t, r.FailedAt)
		between(t, *r.FailedAt, before, after, "failed_at")
		require.Nil(t, r.SentAt)
		require.True(t, r.NextAttemptAt.Equal(due), "a final failure schedules nothing")
		require.Equal(t, string(outbox.CodeNoHandler), *r.LastErrorCode)
		require.Equal(t, "no handler for test.event", *r.LastError)
		requireLeaseEnded(t, r, &b.Token)
		entry := lastLog(t, r)
		require.Equal(t, "failed", entry.Outcome)
		require.Equal(t, 1, entry.Attempt)
	})

	t.Run("snooze spends no attempt", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 2)
		refs := b.Refs()
		// An earlier failure, which the snooze must keep.
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 2, last_error_code = 'timeout',
			last_error = 'slow', attempt_log = '[{"attempt": 2, "outcome": "retry"}]' WHERE id = $1`, refs[0].ID)
		require.NoError(t, err)
		before := dbClock(t, e.db.Pool)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{
			{Ref: refs[0], Snooze: true, Delay: time.Hour, Code: outbox.CodeHandlerError, Message: "not stored"},
			{Ref: refs[1], Snooze: true, Final: true, Code: outbox.CodeSnoozeLimit, Message: "too many"},
		}})
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.Empty(t, res.Lost)
		require.Len(t, res.Retried, 1)
		require.Equal(t, 2, res.Retried[0].Attempts, "no attempt spent")
		require.Equal(t, []lease.Dead{{ID: refs[1].ID, Attempts: 1}}, res.Failed, "Final wins over Snooze")

		r := get(t, e.db.Pool, refs[0].ID)
		require.Equal(t, "PENDING", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, 1, r.Snoozes)
		between(t, r.NextAttemptAt, before.Add(time.Hour), after.Add(time.Hour), "next_attempt_at")
		require.True(t, res.Retried[0].NextAttemptAt.Equal(r.NextAttemptAt))
		require.Equal(t, "timeout", *r.LastErrorCode, "the last failure stays")
		require.Equal(t, "slow", *r.LastError)
		require.Len(t, r.AttemptLog, 1, "a snooze adds no log entry")
		requireLeaseEnded(t, r, &b.Token)

		r = get(t, e.db.Pool, refs[1].ID)
		require.Equal(t, "FAILED", r.Status)
		require.Zero(t, r.Snoozes)
		require.Equal(t, string(outbox.CodeSnoozeLimit), *r.LastErrorCode)

		// The next claim hands out the snooze count and the same attempt
		// number.
		_, err = e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET next_attempt_at = now() WHERE id = $1`, refs[0].ID)
		require.NoError(t, err)
		again := claimN(t, e, 1)
		require.Equal(t, refs[0].ID, again.Events[0].ID)
		require.Equal(t, 3, again.Events[0].Attempt)
		require.Equal(t, 1, again.Events[0].Snoozes)
	})

	t.Run("long message is cut", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 2)
		ascii := strings.Repeat("x", 5000)
		// 3-byte runes: 2048 is not a rune boundary.
		wide := strings.Repeat("€", 2000)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{
			{Ref: b.Refs()[0], Code: outbox.CodePublishError, Message: ascii},
			{Ref: b.Refs()[1], Code: outbox.CodePublishError, Message: wide, Final: true},
		}})
		require.NoError(t, err)
		require.Empty(t, res.Lost)

		r := get(t, e.db.Pool, b.Events[0].ID)
		require.Equal(t, ascii[:2048], *r.LastError)
		require.Equal(t, ascii[:512], *lastLog(t, r).Message)

		r = get(t, e.db.Pool, b.Events[1].ID)
		require.True(t, utf8.ValidString(*r.LastError))
		require.LessOrEqual(t, len(*r.LastError), 2048)
		require.Greater(t, len(*r.LastError), 2048-utf8.UTFMax)
		require.True(t, strings.HasPrefix(wide, *r.LastError))
		require.Equal(t, 512, utf8.RuneCountInString(*lastLog(t, r).Message))
	})

	t.Run("mixed batch in one round trip", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 5)
		refs := b.Refs()
		stranger := lease.Ref{ID: refs[4].ID, Token: uuid.New()}
		pool, tr := tracedPool(t, e.db)
		res, err := e.store.Complete(t.Context(), pool, lease.CompleteParams{
			Sent: []lease.Ref{refs[0], refs[1], stranger},
			Failed: []lease.Failure{
				{Ref: refs[2], Code: outbox.CodeHandlerError, Message: "boom", Delay: time.Minute},
				{Ref: refs[3], Code: outbox.CodePanic, Message: "panic: boom", Final: true},
			},
		})
		require.NoError(t, err)
		queries, batches, batchQueries := tr.counts()
		require.Equal(t, 0, queries, "Complete sent single queries")
		require.Equal(t, 1, batches, "Complete used more than one batch")
		require.Equal(t, 4, batchQueries, "the plan setting, then one statement per token for successes (the stranger's is a second), one for failures")

		require.ElementsMatch(t, []uuid.UUID{refs[0].ID, refs[1].ID}, res.Sent)
		require.Len(t, res.Retried, 1)
		require.Equal(t, refs[2].ID, res.Retried[0].ID)
		require.Equal(t, 1, res.Retried[0].Attempts)
		require.True(t, res.Retried[0].NextAttemptAt.Equal(get(t, e.db.Pool, refs[2].ID).NextAttemptAt))
		require.Equal(t, []lease.Dead{{ID: refs[3].ID, Attempts: 1}}, res.Failed)
		require.Equal(t, []uuid.UUID{stranger.ID}, res.Lost)

		want := map[uuid.UUID][2]string{refs[0].ID: {"outbox_events_sent", "SENT"}, refs[1].ID: {"outbox_events_sent", "SENT"},
			refs[2].ID: {"outbox_events", "PENDING"}, refs[3].ID: {"outbox_events_dead", "FAILED"}, refs[4].ID: {"outbox_events", "PROCESSING"}}
		for id, w := range want {
			requireIn(t, e.db.Pool, id, w[0], w[1])
		}
	})

	t.Run("non-UTF-8 and NUL messages are cleaned", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 3)
		refs := b.Refs()
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{
			Sent: refs[2:],
			Failed: []lease.Failure{
				{Ref: refs[0], Code: outbox.CodeHandlerError, Message: "bad \xff\xfe bytes"},
				{Ref: refs[1], Code: outbox.CodeHandlerError, Message: "nul\x00inside", Final: true},
			},
		})
		require.NoError(t, err)
		require.Empty(t, res.Lost)
		require.Equal(t, []uuid.UUID{refs[2].ID}, res.Sent)

		r := get(t, e.db.Pool, refs[0].ID)
		require.Equal(t, "PENDING", r.Status)
		require.True(t, utf8.ValidString(*r.LastError))
		require.True(t, strings.HasPrefix(*r.LastError, "bad "), *r.LastError)
		require.True(t, strings.HasSuffix(*r.LastError, " bytes"), *r.LastError)
		require.Contains(t, *r.LastError, "\uFFFD")

		r = get(t, e.db.Pool, refs[1].ID)
		require.Equal(t, "FAILED", r.Status)
		require.NotContains(t, *r.LastError, "\x00")
		require.Equal(t, "nulinside", strings.ReplaceAll(*r.LastError, "\uFFFD", ""))
		require.Equal(t, *r.LastError, *lastLog(t, r).Message)
	})

	t.Run("retry on the database clock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 1)
		id := b.Events[0].ID
		const delay = 90*time.Second + 250*time.Microsecond
		before := dbClock(t, e.db.Pool)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Failed: []lease.Failure{{
			Ref: b.Refs()[0], Code: outbox.CodeTimeout, Message: "handler timed out", Delay: delay,
		}}})
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.Len(t, res.Retried, 1)
		require.Empty(t, res.Failed)
		require.Empty(t, res.Lost)

		r := get(t, e.db.Pool, id)
		require.Equal(t, "PENDING", r.Status)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, 1, res.Retried[0].Attempts)
		require.True(t, res.Retried[0].NextAttemptAt.Equal(r.NextAttemptAt))
		entry := lastLog(t, r)
		between(t, entry.Ended, before, after, "ended")
		require.Equal(t, delay, r.NextAttemptAt.Sub(entry.Ended), "next_attempt_at = now() + Delay")
		require.Equal(t, string(outbox.CodeTimeout), *r.LastErrorCode)
		require.Equal(t, "handler timed out", *r.LastError)
		require.Nil(t, r.FailedAt)
		require.Nil(t, r.SentAt)
		requireLeaseEnded(t, r, &b.Token)
		require.Equal(t, normalize(logEntry{
			Attempt: 1, Outcome: "retry", Code: r.LastErrorCode, Message: r.LastError, Owner: "worker-a",
			Started: *r.LockedAt, Ended: entry.Ended,
		}), normalize(entry))

		// Not due before its time: nothing to claim now.
		again, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute})
		require.NoError(t, err)
		require.Empty(t, again.Events)
	})

	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := claimN(t, e, 2)
		id := b.Events[0].ID
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 2 WHERE id = $1`, id)
		require.NoError(t, err)
		before := dbClock(t, e.db.Pool)
		res, err := e.store.Complete(t.Context(), e.db.Pool, lease.CompleteParams{Sent: b.Refs()[:1]})
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.Equal(t, lease.CompleteResult{Sent: []uuid.UUID{id}}, res)

		r := requireIn(t, e.db.Pool, id, "outbox_events_sent", "SENT")
		require.Equal(t, 3, r.Attempts)
		require.NotNil(t, r.SentAt)
		between(t, *r.SentAt, before, after, "sent_at")
		require.Nil(t, r.FailedAt)
		requireLeaseEnded(t, r, &b.Token)
		require.Empty(t, r.AttemptLog, "a success adds no attempt-log entry")
		require.NotNil(t, r.LockOwner)
		require.Equal(t, "worker-a", *r.LockOwner, "the columns name who sent it")
		require.NotNil(t, r.LockedAt)
		require.False(t, r.LockedAt.After(*r.SentAt), "locked_at is when the attempt started")
		require.Equal(t, "PROCESSING", get(t, e.db.Pool, b.Events[1].ID).Status, "only the named row")
	})
}

// normalize returns the entry with its times in UTC, for comparisons that
// should not depend on the session time zone.
func normalize(e logEntry) logEntry {
	e.Started, e.Ended = e.Started.UTC(), e.Ended.UTC()
	return e
}
