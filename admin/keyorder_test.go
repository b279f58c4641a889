package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// On a table migrated without migrations.Config.KeyOrder (no order
// index, so no dispatcher orders per key) a FAILED head blocks nothing:
// Counts, Summary and BlockedKeys say per-key ordering is off, with no
// due row blocked and no blocked key, in either order scope. Once the
// index is built (Migrate with KeyOrder), the same Admin sees the key
// blocked.
func TestBlockedViewsWithoutOrderIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	b := &testBundle{db: db, admin: a}
	b.insert(t, row{Aggregate: "k", Status: "FAILED"}, row{Aggregate: "k"}, row{Aggregate: "j"})

	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.True(t, c.KeyOrderOff)
	require.Zero(t, c.DueBlocked)
	require.Equal(t, int64(2), c.Due)
	s, err := a.Summary(ctx)
	require.NoError(t, err)
	require.True(t, s.Counts.KeyOrderOff)
	require.Zero(t, s.Counts.DueBlocked)
	for _, byType := range []bool{false, true} {
		page, err := a.BlockedKeys(ctx, admin.BlockedParams{ByType: byType})
		require.NoError(t, err)
		require.Equal(t, admin.BlockedPage{Keys: []admin.BlockedKey{}, KeyOrderOff: true}, page, "ByType %t", byType)
	}

	require.NoError(t, migrations.Migrate(ctx, db.Pool, migrations.Config{Table: db.Table(), KeyOrder: true}))
	c, err = a.Counts(ctx)
	require.NoError(t, err)
	require.False(t, c.KeyOrderOff)
	require.Equal(t, int64(1), c.DueBlocked)
	page, err := a.BlockedKeys(ctx, admin.BlockedParams{})
	require.NoError(t, err)
	require.False(t, page.KeyOrderOff)
	require.Len(t, page.Keys, 1)
	require.Equal(t, "k", page.Keys[0].Key)
}
