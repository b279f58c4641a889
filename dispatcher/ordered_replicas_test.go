package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// keyGrid returns nKeys × perKey keys in emit order: each key's events
// interleaved with the other keys', and the key number of each.
func keyGrid(nKeys, perKey int) (keys []string, nums []int) {
	for range perKey {
		for k := range nKeys {
			keys = append(keys, fmt.Sprintf("key-%d", k))
			nums = append(nums, k)
		}
	}
	return keys, nums
}

// Four replicas on one table, 200 keys × 50 events, handlers with a random
// latency and a 10% transient failure rate: every key's events are
// handed out in emit order (a retry repeats its position, and nothing of
// its key comes before it), and all end SENT.
func TestOrderedReplicasKeepEachKeysOrder(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	keys, nums := keyGrid(200, 50)
	ids := insertKeyed(t, db, "ev", keys)
	kc := newKeyCalls(ids, nums)
	for r := range 4 {
		cfg := orderedConfig(db, dispatcher.BlockKey)
		cfg.Owner = fmt.Sprintf("replica-%d", r)
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
			kc.add(e.ID)
			time.Sleep(time.Duration(rand.IntN(2001)) * time.Microsecond)
			if rand.IntN(10) == 0 {
				return errors.New("transient")
			}
			return nil
		}))
		runDispatcher(t, d)
	}
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	kc.requireInOrder(t)
	for k := range 200 {
		require.GreaterOrEqual(t, len(kc.of(k)), 50, "key %d", k)
	}
}

// A replica that dies in the middle of a key (its connections cut while a
// handler of the key runs; its lease expires) leaves the key to another
// replica, which recovers it and goes on from the event that was running:
// the key's order holds.
func TestOrderedCrashMidKey(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	keys, nums := keyGrid(20, 10)
	ids := insertKeyed(t, db, "ev", keys)
	kc := newKeyCalls(ids, nums)
	stuckID := ids[3*20] // key 0's fourth event
	stuck := make(chan struct{})

	kp := newKillablePool(t, db)
	cfgA := orderedConfig(db, dispatcher.BlockKey)
	cfgA.Owner, cfgA.LeaseDuration, cfgA.Wakeup = "victim", time.Second, dispatcher.WakeupDisabled
	cfgA.BatchSize = len(ids) // one batch: the victim holds every event
	a, err := dispatcher.New(kp.Pool, cfgA)
	require.NoError(t, err)
	require.NoError(t, a.Handle("ev", func(ctx context.Context, e outbox.Event) error {
		kc.add(e.ID)
		if e.ID == stuckID {
			close(stuck)
			<-ctx.Done() // until the lease is lost
			return ctx.Err()
		}
		return nil
	}))
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := testctx.ForCleanup(t)
		defer cancel()
		_ = a.Stop(ctx) // its database is gone: what it reports does not matter here
	})
	<-stuck
	// The first four events of every key but the stuck one are SENT
	// before the crash (the later ones wait for the stuck event's wave),
	// so that no outcome of the victim's is lost with it (a lost outcome
	// is redelivered after its key's later events: at-least-once).
	waitFor(t, "the waves before the stuck one SENT", func() bool {
		return statusCounts(t, db)[outbox.StatusSent] == 20*4-1
	})
	kp.kill(t, db)

	cfgB := orderedConfig(db, dispatcher.BlockKey)
	cfgB.Owner, cfgB.RecoverEvery = "rescuer", 1
	b, err := dispatcher.New(db.NewPool(t, 4), cfgB)
	require.NoError(t, err)
	require.NoError(t, b.Handle("ev", func(_ context.Context, e outbox.Event) error {
		kc.add(e.ID)
		return nil
	}))
	runDispatcher(t, b)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	kc.requireInOrder(t)
	require.Equal(t, []int{0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9}, kc.of(0), "the rescuer goes on from the event that was running")
	require.Equal(t, 1, readRow(t, db, stuckID).Recoveries, "its attempt had started")
	for _, id := range ids[4*20 : 5*20] {
		require.Zero(t, readRow(t, db, id).Recoveries, "held for a later wave, never marked started")
	}
}
