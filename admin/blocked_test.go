package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// blockedHeads returns the head ids of every blocked key, walking all
// pages of the given size, with the keys in page order.
func (b *testBundle) blockedHeads(t *testing.T, limit int) ([]string, map[string]admin.BlockedKey) {
	t.Helper()
	var keys []string
	byKey := map[string]admin.BlockedKey{}
	p := admin.BlockedParams{Limit: limit}
	for range 100 {
		page, err := b.admin.BlockedKeys(context.Background(), p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Keys), limit)
		for _, k := range page.Keys {
			keys = append(keys, k.Key)
			byKey[k.Key] = k
		}
		if page.Next == "" {
			return keys, byKey
		}
		p.After = page.Next
	}
	t.Fatal("the walk does not end")
	return nil, nil
}

func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HeadIsTheLowestSeqBlocker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.insert(t,
			row{Aggregate: "a", Status: "FAILED", Code: "handler_error"}, // 0: head of a
			row{Aggregate: "b", Status: "PENDING"},                       // 1: head of b
			row{Aggregate: "a", Status: "PENDING"},
			row{Aggregate: "b", Status: "FAILED"}, // behind a PENDING head: b is not blocked
			row{Aggregate: "c", Status: "FAILED", Skipped: true},
			row{Aggregate: "c", Status: "FAILED", Code: "timeout", Type: "c.type"}, // 5: head of c, behind a skipped one
			row{Aggregate: "d", Status: "FAILED", Skipped: true},
			row{Aggregate: "d", Status: "PENDING"}, // head of d
			row{Aggregate: "e", Status: "SENT"},
			row{Aggregate: "e", Status: "FAILED"}, // 9: head of e, after a SENT row
			row{Aggregate: "f", Status: "PROCESSING"},
			row{Aggregate: "f", Status: "FAILED"},
			row{Aggregate: "g", Partition: "p", Status: "FAILED"}, // 12: key p, not g
			row{Aggregate: "p", Status: "PENDING", DueIn: 3600e9},
			row{Status: "FAILED"}, // no key
			row{Aggregate: "a", Status: "FAILED"},
			row{Aggregate: "a", Status: "FAILED", Skipped: true}, // skipped: does not wait
			row{Aggregate: "a", Status: "SENT"},
			row{Aggregate: "c", Status: "PROCESSING"},
		)
		keys, byKey := b.blockedHeads(t, admin.DefaultBlockedLimit)
		require.Equal(t, []string{"a", "c", "e", "p"}, keys)
		require.Equal(t, ids[0], byKey["a"].HeadID)
		require.Equal(t, 2, byKey["a"].Waiting, "a PENDING and a FAILED event wait behind a's head")
		require.Equal(t, outbox.CodeHandlerError, byKey["a"].Code)
		require.NotNil(t, byKey["a"].FailedAt)
		require.Equal(t, admin.BlockedKey{Key: "c", HeadID: ids[5], HeadSeq: byKey["c"].HeadSeq, Type: "c.type",
			Code: outbox.CodeTimeout, FailedAt: byKey["c"].FailedAt, Waiting: 1}, byKey["c"])
		require.Equal(t, ids[9], byKey["e"].HeadID)
		require.Zero(t, byKey["e"].Waiting)
		require.Equal(t, ids[12], byKey["p"].HeadID)
		require.Equal(t, 1, byKey["p"].Waiting, "a PENDING event not yet due waits too")
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var rows []row
		for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
			rows = append(rows, row{Aggregate: k, Status: "FAILED"}, row{Aggregate: k + "x", Status: "PENDING"})
		}
		b.insert(t, rows...)
		page, err := b.admin.BlockedKeys(context.Background(), admin.BlockedParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, page.Keys, 2)
		require.Equal(t, "k2", page.Next)
		require.Equal(t, 2, page.Scanned, "k1, k2: a page examines the keys with a dead letter only")
		keys, _ := b.blockedHeads(t, 2)
		require.Equal(t, []string{"k1", "k2", "k3", "k4", "k5"}, keys, "every key once, in order")
		keys, _ = b.blockedHeads(t, 1)
		require.Equal(t, []string{"k1", "k2", "k3", "k4", "k5"}, keys)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, row{Aggregate: "a"}, row{Status: "FAILED"}, row{Aggregate: "b"}, row{Aggregate: "b", Status: "FAILED"})
		page, err := b.admin.BlockedKeys(ctx, admin.BlockedParams{})
		require.NoError(t, err)
		require.Equal(t, admin.BlockedPage{Keys: []admin.BlockedKey{}, Scanned: 1}, page, "b, behind its PENDING head")
		b = setup(t)
		page, err = b.admin.BlockedKeys(ctx, admin.BlockedParams{})
		require.NoError(t, err)
		require.Equal(t, admin.BlockedPage{Keys: []admin.BlockedKey{}}, page)
	})

	t.Run("WaitingIsBounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, row{Aggregate: "hot", Status: "FAILED"})
		b.insert(t, many(admin.WaitingCountLimit+5, row{Aggregate: "hot"})...)
		b.insert(t, row{Aggregate: "cold", Status: "FAILED"})
		b.insert(t, many(admin.WaitingCountLimit, row{Aggregate: "cold"})...)
		_, byKey := b.blockedHeads(t, 10)
		require.Equal(t, admin.BlockedKey{Key: "hot", HeadID: byKey["hot"].HeadID, HeadSeq: byKey["hot"].HeadSeq, Type: "test.event",
			FailedAt: byKey["hot"].FailedAt, Waiting: admin.WaitingCountLimit, WaitingCapped: true}, byKey["hot"])
		require.Equal(t, admin.WaitingCountLimit, byKey["cold"].Waiting)
		require.False(t, byKey["cold"].WaitingCapped)
	})

	// A page examines at most BlockedScanLimit keys with a dead letter:
	// past them it returns what it found (here nothing) and a cursor to go
	// on from. Keys without a dead letter cost nothing.
	t.Run("ScanLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id)
			SELECT gen_random_uuid(), 't', 'a' || lpad(i::text, 6, '0') FROM generate_series(1, $1::int) AS i`,
			admin.BlockedScanLimit+1)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_dead (seq, id, event_type, aggregate_id, failed_at)
			SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', 'a' || lpad(i::text, 6, '0'), now()
			FROM generate_series(1, $1::int) AS i`, admin.BlockedScanLimit+1)
		require.NoError(t, err)
		head := b.insert(t, row{Aggregate: "z", Status: "FAILED"})[0]
		page, err := b.admin.BlockedKeys(ctx, admin.BlockedParams{})
		require.NoError(t, err)
		require.Empty(t, page.Keys)
		require.Equal(t, admin.BlockedScanLimit, page.Scanned)
		require.Equal(t, "a010000", page.Next)
		page, err = b.admin.BlockedKeys(ctx, admin.BlockedParams{After: page.Next})
		require.NoError(t, err)
		require.Len(t, page.Keys, 1)
		require.Equal(t, head, page.Keys[0].HeadID)
		require.Empty(t, page.Next)
	})

	t.Run("BadParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []admin.BlockedParams{{Limit: -1}, {Limit: admin.MaxBlockedLimit + 1}, {After: "a\x00"}, {After: "\xff"}} {
			_, err := b.admin.BlockedKeys(ctx, p)
			require.ErrorIs(t, err, outbox.ErrInvalidInput, "%+v", p)
		}
	})
}

// TestSkipHeadsThenBlockedKeys: a skipped head leaves the list, or makes
// the next FAILED event of its key the head; a replay of a skipped event
// clears its skip.
func TestSkipHeadsThenBlockedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Aggregate: "a", Status: "FAILED"}, row{Aggregate: "a", Status: "FAILED"},
		row{Aggregate: "a"}, row{Aggregate: "b", Status: "FAILED"}, row{Aggregate: "b"})
	_, err := b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{ids[0], ids[3]}})
	require.NoError(t, err)
	keys, byKey := b.blockedHeads(t, 10)
	require.Equal(t, []string{"a"}, keys)
	require.Equal(t, ids[1], byKey["a"].HeadID)
	require.Equal(t, "FAILED", b.status(t, ids[0]), "a skipped event stays FAILED")

	res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{ids[0]}})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[0]}, res.Replayed)
	require.Equal(t, 0, b.countWhere(t, "id = $1 AND skipped_at IS NOT NULL", ids[0]), "replay clears the skip")
	keys, _ = b.blockedHeads(t, 10)
	require.Empty(t, keys, "a's head is the replayed, PENDING event")
}

// With the ordered claim under head policy BlockKey (lease.ClaimParams
// Ordered and BlockFailed), a FAILED head holds its key until an
// operator acts: a skip lets the next event out; a replay makes the head
// itself the next event claimed, before its successors.
func TestOperatorActionsUnblockTheOrderedClaim(t *testing.T) {
	t.Skip("TODO(i25): needs the ordered claim that reads the dead letters (branch i25-lease); remove this skip at the merge")
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := lease.New(b.db.Table())
	require.NoError(t, err)
	claim := func() []uuid.UUID {
		t.Helper()
		batch, err := store.Claim(ctx, b.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute,
			Ordered: true, BlockFailed: true})
		require.NoError(t, err)
		var ids []uuid.UUID
		for _, e := range batch.Events {
			ids = append(ids, e.ID)
		}
		_, err = b.db.Pool.Exec(ctx, "UPDATE outbox_events SET status = 'PENDING', lock_token = NULL, lease_until = NULL WHERE status = 'PROCESSING'")
		require.NoError(t, err)
		return ids
	}
	ids := b.insert(t, row{Aggregate: "a", Status: "FAILED"}, row{Aggregate: "a"}, row{Aggregate: "b", Status: "FAILED"},
		row{Aggregate: "b"}, row{Aggregate: "b"})
	require.Empty(t, claim(), "both keys are held by their FAILED heads")
	keys, _ := b.blockedHeads(t, 10)
	require.Equal(t, []string{"a", "b"}, keys)

	_, err = b.admin.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{ids[0]}})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[1]}, claim(), "a's next event goes out; b stays held")

	_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{ids[2]}})
	require.NoError(t, err)
	got := claim()
	require.Contains(t, got, ids[2])
	if i := slices.Index(got, ids[3]); i >= 0 {
		require.Less(t, slices.Index(got, ids[2]), i, "the replayed head comes before b's successors")
	}
	keys, _ = b.blockedHeads(t, 10)
	require.Empty(t, keys)
}

// By type, the head of each (key, type) pair blocks only its pair: a
// FAILED event behind a PENDING event of another type of its key is a
// blocked pair's head, and a FAILED key head blocks only its own type.
func TestBlockedKeysByType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t,
		row{Aggregate: "a", Type: "t1", Status: "FAILED", Code: "handler_error"}, // 0: head of a, and of (a, t1)
		row{Aggregate: "a", Type: "t2", Status: "PENDING"},                       // head of (a, t2)
		row{Aggregate: "a", Type: "t1", Status: "PENDING"},
		row{Aggregate: "a", Type: "t2", Status: "FAILED"},
		row{Aggregate: "b", Type: "t1", Status: "PENDING"}, // head of b
		row{Aggregate: "b", Type: "t2", Status: "FAILED"},  // 5: head of (b, t2)
		row{Aggregate: "b", Type: "t2", Status: "PENDING"},
		row{Aggregate: "c", Type: "t1", Status: "FAILED", Skipped: true},
		row{Aggregate: "c", Type: "t1", Status: "FAILED"}, // 8: head of c and (c, t1)
	)
	keys, _ := b.blockedHeads(t, 10)
	require.Equal(t, []string{"a", "c"}, keys, "by key")

	page, err := b.admin.BlockedKeys(context.Background(), admin.BlockedParams{ByType: true})
	require.NoError(t, err)
	require.Empty(t, page.Next)
	require.Equal(t, 3, page.Scanned)
	var got [][3]string
	for _, k := range page.Keys {
		got = append(got, [3]string{k.Key, k.Type, k.HeadID.String()})
		require.False(t, k.WaitingCapped)
	}
	require.Equal(t, [][3]string{{"a", "t1", ids[0].String()}, {"b", "t2", ids[5].String()}, {"c", "t1", ids[8].String()}}, got)
	require.Equal(t, []int{1, 1, 0}, []int{page.Keys[0].Waiting, page.Keys[1].Waiting, page.Keys[2].Waiting})
	require.Equal(t, outbox.CodeHandlerError, page.Keys[0].Code)

	page, err = b.admin.BlockedKeys(context.Background(), admin.BlockedParams{ByType: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Keys, 1)
	require.Equal(t, "a", page.Next)
	page, err = b.admin.BlockedKeys(context.Background(), admin.BlockedParams{ByType: true, Limit: 1, After: "a"})
	require.NoError(t, err)
	require.Equal(t, "b", page.Keys[0].Key)
}

// By type, a key with more blockers than are read marks its pairs'
// counts as capped.
func TestBlockedKeysByTypeBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, row{Aggregate: "hot", Type: "t1", Status: "FAILED"})
	b.insert(t, many(admin.WaitingCountLimit+5, row{Aggregate: "hot", Type: "t2"})...)
	page, err := b.admin.BlockedKeys(context.Background(), admin.BlockedParams{ByType: true})
	require.NoError(t, err)
	require.Len(t, page.Keys, 1)
	require.Equal(t, "t1", page.Keys[0].Type)
	require.Zero(t, page.Keys[0].Waiting)
	require.True(t, page.Keys[0].WaitingCapped, "the key has more blockers than were read")
}
