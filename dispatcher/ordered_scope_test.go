package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// insertTyped commits one event per (type, key) pair, in that order (seq
// order), with the key as partition key, and returns their IDs.
func insertTyped(t *testing.T, db *testdb.DB, pairs ...[2]string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(pairs))
	for i, p := range pairs {
		ids[i] = insertKeyed(t, db, p[0], []string{p[1]})[0]
	}
	return ids
}

// A failing handler of type A on key k: under ScopeKeyAndType it holds
// only k's events of type A, and k's events of type B are delivered;
// under the default ScopeKey it holds k's events of every type. Both when
// the head fails in the batch that claimed the key's events (the waves)
// and when it was FAILED before (the claim).
func TestOrderScope(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, scope dispatcher.OrderScope, failedBefore bool) (*testdb.DB, []uuid.UUID, *dispatcher.Dispatcher) {
		db := testdb.NewMigrated(t, testdb.KeyOrder)
		ids := insertTyped(t, db, [2]string{"email", "k"}, [2]string{"order.cancelled", "k"},
			[2]string{"email", "k"}, [2]string{"order.cancelled", "k"}, [2]string{"email", "j"})
		if failedBefore {
			db.MoveToDead(t, ids[0], "handler_error")
		}
		cfg := orderedConfig(db, dispatcher.BlockKey)
		cfg.OrderScope = scope
		d, err := dispatcher.New(db.NewPool(t, 6), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("email", func(_ context.Context, e outbox.Event) error {
			if e.ID == ids[0] {
				return outbox.Permanent(errors.New("smtp down"))
			}
			return nil
		}))
		require.NoError(t, d.Handle("order.cancelled", func(context.Context, outbox.Event) error { return nil }))
		runDispatcher(t, d)
		return db, ids, d
	}
	for _, failedBefore := range []bool{false, true} {
		name := map[bool]string{false: "head fails in the batch", true: "head FAILED before"}[failedBefore]
		t.Run(name+"/ScopeKey", func(t *testing.T) {
			t.Parallel()
			db, ids, d := setup(t, dispatcher.ScopeKey, failedBefore)
			waitFor(t, "k's head FAILED, j SENT", func() bool {
				c := statusCounts(t, db)
				return c[outbox.StatusFailed] == 1 && c[outbox.StatusSent] == 1
			})
			cycles := d.Stats().ClaimCycles
			waitFor(t, "more claims", func() bool { return d.Stats().ClaimCycles >= cycles+5 })
			for _, id := range ids[1:4] {
				require.Equal(t, outbox.StatusPending, readRow(t, db, id).Status, "k's later events of both types wait")
			}
			if !failedBefore {
				require.EqualValues(t, 3, d.Stats().OrderReleased, "the batch released k's later events")
			}
		})
		t.Run(name+"/ScopeKeyAndType", func(t *testing.T) {
			t.Parallel()
			db, ids, d := setup(t, dispatcher.ScopeKeyAndType, failedBefore)
			waitFor(t, "k's order.cancelled events and j SENT", func() bool {
				return readRow(t, db, ids[1]).Status == outbox.StatusSent && readRow(t, db, ids[3]).Status == outbox.StatusSent &&
					readRow(t, db, ids[4]).Status == outbox.StatusSent
			})
			require.Equal(t, outbox.StatusFailed, readRow(t, db, ids[0]).Status)
			cycles := d.Stats().ClaimCycles
			waitFor(t, "more claims", func() bool { return d.Stats().ClaimCycles >= cycles+5 })
			require.Equal(t, outbox.StatusPending, readRow(t, db, ids[2]).Status, "k's later email waits behind its FAILED head")
			if !failedBefore {
				require.EqualValues(t, 1, d.Stats().OrderReleased, "the batch released k's later email, not its order.cancelled events")
			}
		})
	}
}

// OrderScope is checked by New.
func TestOrderScopeConfig(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	cfg := baseConfig(db)
	cfg.OrderScope = dispatcher.ScopeKeyAndType
	_, err := dispatcher.New(db.Pool, cfg)
	var cerr *outbox.ConfigError
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "OrderScope", cerr.Field, "ScopeKeyAndType needs PerKey")
	cfg.OrderScope = dispatcher.OrderScope(7)
	cfg.Ordering = dispatcher.PerKey
	_, err = dispatcher.New(db.Pool, cfg)
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "OrderScope", cerr.Field)
}

// Four replicas with ScopeKeyAndType on one table, 100 keys × 2 types ×
// 10 events, emitted interleaved, handlers with a random latency and a 10%
// transient failure rate: each (key, type) pair's events are handed out
// in emit order, and all end SENT.
func TestOrderedReplicasKeepEachPairsOrder(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	var keys, types []string
	var nums []int
	for i := range 10 * 100 * 2 {
		k, ty := (i/2)%100, i%2
		keys, types = append(keys, fmt.Sprintf("key-%d", k)), append(types, []string{"a", "b"}[ty])
		nums = append(nums, 2*k+ty)
	}
	ids := make([]uuid.UUID, len(keys))
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type, partition_key, payload)
		SELECT id, ty, key, '\x7b7d' FROM unnest($1::uuid[], $2::text[], $3::text[]) WITH ORDINALITY AS x(id, key, ty, n) ORDER BY n`,
		ids, keys, types)
	require.NoError(t, err)
	kc := newKeyCalls(ids, nums)
	handler := func(_ context.Context, e outbox.Event) error {
		kc.add(e.ID)
		time.Sleep(time.Duration(rand.IntN(2001)) * time.Microsecond)
		if rand.IntN(10) == 0 {
			return errors.New("transient")
		}
		return nil
	}
	for r := range 4 {
		cfg := orderedConfig(db, dispatcher.BlockKey)
		cfg.Owner, cfg.OrderScope = fmt.Sprintf("replica-%d", r), dispatcher.ScopeKeyAndType
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("a", handler))
		require.NoError(t, d.Handle("b", handler))
		runDispatcher(t, d)
	}
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	kc.requireInOrder(t)
	for p := range 200 {
		require.GreaterOrEqual(t, len(kc.of(p)), 10, "pair %d", p)
	}
}
