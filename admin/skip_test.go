package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestSkipHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SkipsFailedKeepsHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.insert(t, row{Aggregate: "a", Status: "FAILED", Code: "timeout", Attempts: 3}, row{Aggregate: "a", Status: "FAILED"},
			row{Aggregate: "a", Status: "FAILED"})
		before, err := b.admin.Inspect(ctx, ids[0])
		require.NoError(t, err)
		res, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{ids[1], ids[0], ids[1]}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ids[1], ids[0]}, res.Skipped, "once each, in the order named")
		require.Len(t, res.At, 2)
		require.Equal(t, 1, b.countWhere(t, "id = $1 AND skipped_at = $2 AND skipped_at <= now()", ids[1], res.At[0]))
		require.Equal(t, 2, b.countWhere(t, "skipped_at IS NOT NULL"))
		after, err := b.admin.Inspect(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, before, after, "status, error, attempts and log stay")

		// A second skip keeps the first time.
		res2, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{ids[0], ids[2]}})
		require.NoError(t, err)
		require.Equal(t, res.At[1], res2.At[0])
		require.Equal(t, 3, b.countWhere(t, "skipped_at IS NOT NULL"))
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.insert(t, row{Status: "FAILED"}, row{Status: "PENDING"}, row{Status: "SENT"}, row{Status: "PROCESSING"},
			row{Status: "FAILED"})
		missing := uuid.New()
		before := b.snapshot(t)
		for _, dry := range []bool{true, false} {
			_, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{ids[0], ids[1], missing, ids[2], ids[3], ids[4]}, DryRun: dry})
			require.ErrorIs(t, err, admin.ErrNotSkippable)
			var serr *admin.SkipError
			require.ErrorAs(t, err, &serr)
			require.Equal(t, []admin.Rejected{{ID: ids[1], Status: outbox.StatusPending}, {ID: missing},
				{ID: ids[2], Status: outbox.StatusSent}, {ID: ids[3], Status: outbox.StatusProcessing}}, serr.Rejected)
			require.Equal(t, 6, serr.Named)
			require.Contains(t, err.Error(), "4 of 6 ids cannot be skipped, nothing was written: "+ids[1].String()+" is PENDING, not FAILED; "+
				missing.String()+" not found")
			require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
			require.Equal(t, before, b.snapshot(t), "nothing written")
		}
	})

	// A named FAILED row that another transaction holds (here a replay
	// not yet committed) is not waited for: the call writes nothing, not
	// even the other rows, and says the row is locked. Once the replay
	// commits, the row is PENDING and still refused.
	t.Run("LockedRowWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.insert(t, row{Aggregate: "a", Status: "FAILED"}, row{Aggregate: "b", Status: "FAILED"})
		before := b.snapshot(t)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		inTx, err := admin.New(tx, admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		_, err = inTx.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{ids[1]}})
		require.NoError(t, err)

		_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids})
		var serr *admin.SkipError
		require.ErrorAs(t, err, &serr)
		require.Equal(t, []admin.Rejected{{ID: ids[1], Status: outbox.StatusFailed, Locked: true}}, serr.Rejected)
		require.Contains(t, err.Error(), ids[1].String()+" is locked by another transaction")
		require.Equal(t, before, b.snapshot(t), "the unlocked FAILED row is not skipped either")

		require.NoError(t, tx.Commit(ctx))
		_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids})
		require.ErrorAs(t, err, &serr)
		require.Equal(t, []admin.Rejected{{ID: ids[1], Status: outbox.StatusPending}}, serr.Rejected)
		require.Zero(t, b.countWhere(t, "skipped_at IS NOT NULL"))
	})

	t.Run("DryRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.insert(t, row{Status: "FAILED"}, row{Status: "FAILED"})
		before := b.snapshot(t)
		res, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, admin.SkipResult{Skipped: ids}, res)
		require.Equal(t, before, b.snapshot(t))
	})

	t.Run("Notifies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.insert(t, row{Status: "FAILED"})[0]
		listener := b.listen(t)
		_, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{id}})
		require.NoError(t, err)
		b.notified(t, listener)
	})

	t.Run("BadParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, ids := range [][]uuid.UUID{nil, {}, make([]uuid.UUID, admin.MaxSkipIDs+1)} {
			_, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: ids})
			require.ErrorIs(t, err, outbox.ErrInvalidInput)
			require.False(t, errors.Is(err, admin.ErrNotSkippable))
		}
	})
}
