package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// TestTakeGroupAfterARestoreIntoAnotherCluster: a logical dump restored
// into another cluster brings ticks that all carry the old cluster's
// system identifier. The ticker refuses to tick there (PGR03), and no
// tick of the new cluster is ever recorded, so comparing the ticks with
// each other finds nothing: a reader taking the group must compare them
// with the cluster it runs on, and stop the group (docs/relay.md,
// "Restore and failover": ErrDatabaseChanged) rather than wait for ticks
// forever.
func TestTakeGroupAfterARestoreIntoAnotherCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, token := e.group(t, "g")
	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	require.NoError(t, e.store.ReleaseGroup(ctx, "g", token))
	_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET sysid = sysid + 1`)
	require.NoError(t, err)

	_, _, err = e.store.Tick(ctx, e.ticker, 0)
	require.ErrorIs(t, err, store.ErrDatabaseChanged, "the ticker refuses")
	_, err = e.store.TakeGroup(ctx, "g", "test", uuid.New(), time.Hour)
	require.ErrorIs(t, err, store.ErrDatabaseChanged, "the reader stops the group")
}
