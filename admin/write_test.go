package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ByIDsSkipsNonFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, row{Status: "FAILED"}, row{Status: "PENDING"}, row{Status: "PROCESSING"},
			row{Status: "SENT"}, row{Status: "FAILED"}, row{Status: "FAILED"})
		failed, pending, processing, sent, failed2, untouched := got[0], got[1], got[2], got[3], got[4], got[5]
		missing := uuid.New()
		before := map[uuid.UUID]string{}
		for _, id := range []uuid.UUID{pending, processing, sent} {
			d, err := b.admin.Inspect(ctx, id)
			require.NoError(t, err)
			before[id] = d.NextAttemptAt.String() + d.Status.String()
		}
		res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{failed, pending, processing, sent, missing, failed2, failed}})
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{failed, failed2}, res.Replayed)
		require.Equal(t, []uuid.UUID{pending, processing, sent, missing}, res.Skipped)
		require.Equal(t, "PENDING", b.status(t, failed))
		require.Equal(t, "PENDING", b.status(t, failed2))
		require.Equal(t, "FAILED", b.status(t, untouched), "a row not named stays FAILED")
		for id, want := range before {
			d, err := b.admin.Inspect(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want, d.NextAttemptAt.String()+d.Status.String(), "skipped row changed")
		}
	})

	t.Run("ResetsBudgetKeepsHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		log := `[{"attempt": 5, "outcome": "failed", "code": "handler_error", "message": "m", "owner": "w",
			"started": "2024-05-01T10:00:00Z", "ended": "2024-05-01T10:00:01Z"}]`
		id := b.insert(t, row{Status: "FAILED", Code: "snooze_limit", Attempts: 5, Recoveries: 2, Snoozes: 1000,
			DueIn: time.Hour, AttemptLog: log})[0]
		res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, res.Replayed)
		require.Empty(t, res.Skipped)
		d, err := b.admin.Inspect(ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusPending, d.Status)
		require.Zero(t, d.Attempts)
		require.Zero(t, d.Recoveries)
		require.Zero(t, d.Snoozes)
		require.Nil(t, d.FailedAt)
		require.Equal(t, outbox.CodeSnoozeLimit, d.LastErrorCode)
		require.Equal(t, "boom: snooze_limit", d.LastError)
		require.Len(t, d.AttemptLog, 1)
		require.Equal(t, 1, b.countWhere(t, "id = $1 AND next_attempt_at <= now()", id), "due now by the database clock")
	})

	t.Run("ReplayedRowIsClaimable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.insert(t, row{Status: "FAILED", Attempts: 3, DueIn: time.Hour})[0]
		store, err := lease.New(b.db.Table())
		require.NoError(t, err)
		claim := func() lease.Batch {
			batch, err := store.Claim(ctx, b.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute})
			require.NoError(t, err)
			return batch
		}
		require.Empty(t, claim().Events, "a FAILED row is not claimable")
		_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		batch := claim()
		require.Len(t, batch.Events, 1)
		require.Equal(t, id, batch.Events[0].ID)
		require.Equal(t, 1, batch.Events[0].Attempt, "the retry budget starts again")
	})

	t.Run("Filter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t,
			row{Status: "FAILED", Type: "a", Code: "handler_error", FailedAgo: 2 * time.Hour},
			row{Status: "FAILED", Type: "a", Code: "timeout", FailedAgo: 2 * time.Hour},
			row{Status: "FAILED", Type: "b", Code: "handler_error", FailedAgo: 2 * time.Hour},
			row{Status: "FAILED", Type: "a", Code: "handler_error", FailedAgo: time.Minute},
			row{Status: "PENDING", Type: "a", Code: "handler_error"},
		)
		var now time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT now()").Scan(&now))
		res, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "a", Code: outbox.CodeHandlerError, FailedBefore: now.Add(-time.Hour)})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{got[0]}, res.Replayed)
		require.Empty(t, res.Skipped)
		require.Equal(t, 3, b.countWhere(t, "status = 'FAILED'"))

		res, err = b.admin.Replay(ctx, admin.ReplayParams{Code: outbox.CodeHandlerError})
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{got[2], got[3]}, res.Replayed)
		require.Equal(t, "FAILED", b.status(t, got[1]), "a timeout failure is not replayed")
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, many(7, row{Status: "FAILED"})...)
		res, err := b.admin.Replay(ctx, admin.ReplayParams{Limit: 3})
		require.NoError(t, err)
		require.ElementsMatch(t, got[:3], res.Replayed, "oldest seq first")
		require.Equal(t, 4, b.countWhere(t, "status = 'FAILED'"))
		res, err = b.admin.Replay(ctx, admin.ReplayParams{})
		require.NoError(t, err)
		require.ElementsMatch(t, got[3:], res.Replayed)
		require.Zero(t, b.countWhere(t, "status = 'FAILED'"))
	})

	t.Run("ByCodeThenSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, row{Status: "FAILED"}, row{Status: "FAILED", Code: "timeout"},
			row{Status: "FAILED", Code: "handler_error"}, row{Status: "FAILED", Code: "handler_error"})
		for _, want := range [][]uuid.UUID{{got[2], got[3]}, {got[1]}, {got[0]}} {
			res, err := b.admin.Replay(ctx, admin.ReplayParams{Limit: len(want)})
			require.NoError(t, err)
			require.ElementsMatch(t, want, res.Replayed, "by code, rows without one last, then oldest seq first")
		}
	})

	t.Run("Notifies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.insert(t, row{Status: "FAILED"})[0]
		listener := b.listen(t)

		// Nothing replayed: no notification.
		_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{uuid.New()}})
		require.NoError(t, err)
		b.notNotified(t, listener) // a replay that changed nothing must not notify

		_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		b.notified(t, listener)
	})

	t.Run("InCallersTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.insert(t, row{Status: "FAILED"})[0]
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		a, err := admin.New(tx, admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		res, err := a.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{id}, res.Replayed)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, "FAILED", b.status(t, id), "the caller's rollback undoes the replay")
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NeverPendingOrProcessing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// PENDING and PROCESSING rows with old sent_at/failed_at stamps
		// (as a replayed row might carry) must still never be purged.
		keep := b.insert(t,
			row{Status: "PENDING", SentAgo: 48 * time.Hour, FailedAgo: 48 * time.Hour},
			row{Status: "PROCESSING", SentAgo: 48 * time.Hour, FailedAgo: 48 * time.Hour})
		gone := b.insert(t, row{Status: "SENT", SentAgo: 48 * time.Hour}, row{Status: "FAILED", FailedAgo: 48 * time.Hour})
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		n, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, "PENDING", b.status(t, keep[0]))
		require.Equal(t, "PROCESSING", b.status(t, keep[1]))
		require.Empty(t, b.status(t, gone[0]))
		require.Empty(t, b.status(t, gone[1]))
	})

	t.Run("OlderThan", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t,
			row{Status: "SENT", SentAgo: 3 * time.Hour}, row{Status: "SENT", SentAgo: 30 * time.Minute},
			row{Status: "FAILED", FailedAgo: 3 * time.Hour}, row{Status: "FAILED", FailedAgo: 30 * time.Minute},
			// A SENT row whose failed_at is old: the SENT purge looks at sent_at only.
			row{Status: "SENT", SentAgo: time.Minute, FailedAgo: 3 * time.Hour})
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Hour})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		n, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed, OlderThan: time.Hour})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Empty(t, b.status(t, got[0]))
		require.Equal(t, "SENT", b.status(t, got[1]))
		require.Empty(t, b.status(t, got[2]))
		require.Equal(t, "FAILED", b.status(t, got[3]))
		require.Equal(t, "SENT", b.status(t, got[4]))
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, many(12, row{Status: "SENT", SentAgo: time.Hour})...)
		for _, want := range []int64{5, 5, 2, 0} {
			n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, Limit: 5})
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
	})

	t.Run("DefaultLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'SENT', now() - interval '1 hour' FROM generate_series(1, $1)`, admin.DefaultPurgeLimit+5)
		require.NoError(t, err)
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent})
		require.NoError(t, err)
		require.Equal(t, int64(admin.DefaultPurgeLimit), n)
		require.Equal(t, 5, b.countWhere(t, "true"))
	})
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, many(4, row{Status: "SENT", SentAgo: 2 * time.Hour})...)
		b.insert(t, row{Status: "SENT", SentAgo: time.Minute}, row{Status: "PENDING", SentAgo: 2 * time.Hour})
		before := b.snapshot(t)
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Hour, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
		n, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Hour, Limit: 3, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, int64(3), n, "the dry run counts up to Limit")
		require.Equal(t, before, b.snapshot(t))
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, row{Status: "FAILED"}, row{Status: "SENT"}, row{Status: "FAILED", Type: "other"})
		before := b.snapshot(t)
		res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: got[:2], DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{got[0]}, res.Replayed)
		require.Equal(t, []uuid.UUID{got[1]}, res.Skipped)
		res, err = b.admin.Replay(ctx, admin.ReplayParams{Type: "other", DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{got[2]}, res.Replayed)
		require.Equal(t, before, b.snapshot(t))
	})
}
