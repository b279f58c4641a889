package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// A due PENDING row that every claim skips (SKIP LOCKED: another
// transaction holds its row lock) makes claims come back empty; the
// coordinator then settles and finds the row due already. It must claim
// again a cooldown later, not at once: with wake-ups that claim at once
// while quiet, the loop claim → next-due query → claim ran back to back,
// about 3,500 claims a second on one replica, for as long as the lock was
// held.
func TestLockedDueRowDoesNotSpinClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	cfg, _, _ := wakeupConfig(t, db)
	follow := watchFollowUps(&cfg)
	id := emitOne(t, db, "x")
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT id FROM outbox_events WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)

	d, h := startListening(t, db, cfg)
	follow.waitOver(t, d, 1) // the start-up wake-up's follow-ups are over
	before := d.Stats().ClaimCycles
	time.Sleep(time.Second) // the window of the measured rate
	claims := d.Stats().ClaimCycles - before
	t.Logf("claim cycles in 1s with one locked due row: %d", claims)
	require.NoError(t, tx.Rollback(ctx))
	h.wait(t, id)
	require.Less(t, claims, uint64(300), "follow-ups every 4ms are 250/s by design; the old cooldown gave about 50/s")
}
