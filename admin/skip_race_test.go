package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
)

// A dead letter that leaves the dead letters between the skip
// statement's snapshot and its lock (a replay moves it back into the
// outbox table) is refused, never reported skipped while left as it was.
// The skip is paused on the row (a row-level-security policy whose
// function waits for an advisory lock the test holds) while the replay
// commits from another connection.
func TestSkipHeadsRowReplayedMidStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "FAILED", Aggregate: "a"}, row{Aggregate: "a"})
	const key = 7_301
	role := b.db.NewRole(t, "skipper")
	pause := b.db.PauseRowReads(t, role, ids[0].String(), key)
	_, err := b.db.Pool.Exec(ctx, `GRANT SELECT, UPDATE ON outbox_events_dead, outbox_events_sent TO `+role+`;
		ALTER TABLE outbox_events_dead ENABLE ROW LEVEL SECURITY;
		CREATE POLICY pause ON outbox_events_dead USING (pause_at(id))`)
	require.NoError(t, err)
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
	res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: ids[:1]})
	require.NoError(t, err)
	require.Equal(t, ids[:1], res.Replayed)
	pause.Release(t)

	got := <-done
	require.ErrorIs(t, got.err, admin.ErrNotSkippable, "%+v", got.res)
	require.Equal(t, "PENDING", b.status(t, ids[0]))
	require.Zero(t, b.countWhere(t, "skipped_at IS NOT NULL"), "nothing written")
}
