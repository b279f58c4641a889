package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// TestTakeGroupAfterARestoreIntoALowerCluster: a logical dump restored
// into a cluster whose transaction ids are lower brings ticks that all
// agree with each other, whose snapshots count the new cluster's next ids
// as finished. The ticker refuses to tick there (its snapshot went
// backwards), so a reader taking the group must compare the newest tick
// with the cluster it runs on, and stop the group rather than wait for
// ticks forever (docs/relay.md, "Restore and failover").
func TestTakeGroupAfterARestoreIntoALowerCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, token := e.group(t, "g")
	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	require.NoError(t, e.store.ReleaseGroup(ctx, "g", token))
	_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET snapshot = (
		(pg_snapshot_xmin(snapshot)::text::numeric + 1000000)::text || ':' ||
		(pg_snapshot_xmax(snapshot)::text::numeric + 1000000)::text || ':')::pg_snapshot`)
	require.NoError(t, err)

	_, _, err = e.store.Tick(ctx, e.ticker, 0)
	require.ErrorIs(t, err, store.ErrSnapshotBackwards, "the ticker refuses")
	_, err = e.store.TakeGroup(ctx, "g", "test", uuid.New(), time.Hour)
	require.ErrorIs(t, err, store.ErrSnapshotBackwards, "the reader stops the group")
}

// TestANewSystemIdentifierAloneChangesNothing: pg_upgrade keeps the
// transaction ids under a new system identifier, so the snapshots stay
// valid: the ticker ticks and the reader reads on.
func TestANewSystemIdentifierAloneChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, token := e.group(t, "g")
	require.NoError(t, e.store.ReleaseGroup(ctx, "g", token))
	_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET sysid = sysid + 1`)
	require.NoError(t, err)
	emit(t, e.db.Pool, "k", 1)
	_, made, err := e.store.Tick(ctx, e.ticker, 0)
	require.NoError(t, err)
	require.True(t, made)
	_, err = e.store.TakeGroup(ctx, "g", "test", uuid.New(), time.Hour)
	require.NoError(t, err)
}
