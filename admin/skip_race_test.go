package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
)

// A row that becomes FAILED between the skip statement's snapshot and its
// lock is either skipped or refused, never reported skipped while left
// as it was (its key stays blocked). The skip is paused on the row (a
// row-level-security policy whose function waits for an advisory lock the
// test holds) while its outcome commits from another connection.
func TestSkipHeadsRowFailedMidStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "PROCESSING", Aggregate: "a"}, row{Aggregate: "a"})
	const key = 7_301
	role := b.db.NewRole(t, "skipper")
	pause := b.db.PauseRowReads(t, role, ids[0].String(), key)
	a, err := admin.New(b.db.RoleConn(t, role), admin.Config{Table: b.db.Table()})
	require.NoError(t, err)

	type outcome struct {
		res admin.SkipResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := a.SkipHeads(ctx, admin.SkipParams{IDs: ids[:1]})
		done <- outcome{res, err}
	}()
	pause.AwaitPaused(t)
	_, err = b.db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'FAILED', failed_at = now(),
		lock_token = NULL, lock_owner = NULL, locked_at = NULL, lease_until = NULL, heartbeat_at = NULL WHERE id = $1`, ids[0])
	require.NoError(t, err)
	pause.Release(t)

	got := <-done
	if got.err != nil {
		require.ErrorIs(t, got.err, admin.ErrNotSkippable)
		return
	}
	require.Equal(t, ids[:1], got.res.Skipped)
	require.Len(t, got.res.At, 1, "a skipped_at for each row reported skipped")
	require.Equal(t, 1, b.countWhere(t, "id = $1 AND skipped_at IS NOT NULL", ids[0]), "reported skipped: written")
}
