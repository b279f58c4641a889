package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(`
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE ON outbox_events TO %[2]s;
CREATE FUNCTION pause_at(row_id uuid) RETURNS bool LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
	IF row_id = '%[3]s' THEN
		PERFORM pg_advisory_xact_lock_shared(%[4]d);
	END IF;
	RETURN true;
END $f$;
ALTER TABLE outbox_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY pause ON outbox_events USING (pause_at(id))`,
		pgx.Identifier{b.db.Schema}.Sanitize(), pgx.Identifier{role}.Sanitize(), ids[0], key))
	require.NoError(t, err)
	gate := b.db.Conn(t)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
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
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objid = $1`, key).Scan(&n))
		return n > 0
	}, time.Minute, 5*time.Millisecond)
	_, err = b.db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'FAILED', failed_at = now(),
		lock_token = NULL, lock_owner = NULL, locked_at = NULL, lease_until = NULL, heartbeat_at = NULL WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)

	got := <-done
	if got.err != nil {
		require.ErrorIs(t, got.err, admin.ErrNotSkippable)
		return
	}
	require.Equal(t, ids[:1], got.res.Skipped)
	require.Len(t, got.res.At, 1, "a skipped_at for each row reported skipped")
	require.Equal(t, 1, b.countWhere(t, "id = $1 AND skipped_at IS NOT NULL", ids[0]), "reported skipped: written")
}
