package store_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// countingDB counts the events statements (batch reads and streams) run
// on its DB.
type countingDB struct {
	store.DB
	events atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "pg_visible_in_snapshot") {
		c.events.Add(1)
	}
	return c.DB.Query(ctx, sql, args...)
}

// bigTransaction commits n events of key k in one transaction and
// returns their ids in seq order.
func bigTransaction(t *testing.T, e env, key string, n int) []uuid.UUID {
	t.Helper()
	tx := begin(t, e.db.Pool)
	var ids []uuid.UUID
	for done := 0; done < n; done += 10_000 {
		ids = append(ids, emit(t, tx, key, min(10_000, n-done))...)
	}
	require.NoError(t, tx.Commit(t.Context()))
	return ids
}

// streamPieces reads st to its end in pieces of n, moving the cursor
// after each, and returns the ids read and the pieces.
func streamPieces(t *testing.T, s *store.Store, token uuid.UUID, cur batch.Cursor, st *store.Stream, n int) ([]uuid.UUID, []batch.Batch, batch.Cursor) {
	t.Helper()
	var got []uuid.UUID
	var pieces []batch.Batch
	for {
		b, err := st.Next(n)
		require.NoError(t, err)
		got = append(got, ids(b.Events)...)
		pieces = append(pieces, b)
		cur, err = s.Move(t.Context(), token, cur, b, nil, nil)
		require.NoError(t, err)
		if !b.Partial {
			return got, pieces, cur
		}
	}
}

// A batch of one huge transaction is read by one events statement and
// published in pieces of MaxBatch, one cursor move each, in seq order.
func TestStreamOneHugeTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	db := &countingDB{DB: e.db.Pool}
	s, err := store.New(db, e.store.Names().Table)
	require.NoError(t, err)
	cur, token := e.group(t, "g")
	want := bigTransaction(t, e, "k", 20_000)
	target := e.tick(t)

	st, ok, err := s.Stream(ctx, token, cur, 1000)
	require.NoError(t, err)
	require.True(t, ok)
	defer st.Close()
	require.Equal(t, target, st.To.ID)
	got, pieces, cur := streamPieces(t, s, token, cur, st, 1000)
	require.Equal(t, want, got, "every event once, in seq order")
	require.Len(t, pieces, 20, "20 cursor moves")
	for i, p := range pieces {
		require.Len(t, p.Events, 1000)
		require.Equal(t, i < 19, p.Partial)
	}
	require.Equal(t, int64(1), db.events.Load(), "one events statement")
	require.Equal(t, batch.Cursor{Group: "g", LastTick: target}, cur)

	_, ok, err = s.Stream(ctx, token, cur, 1000)
	require.NoError(t, err)
	require.False(t, ok, "no tick after")
}

// A stream cancelled mid-way (its reader killed) leaves the cursor at
// the last piece moved; the next holder streams seq > batch_seq once,
// against the same target, and nothing is lost.
func TestStreamCancelledResumesAtBatchSeq(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cur, token := e.group(t, "g")
	want := bigTransaction(t, e, "k", 5000)
	target := e.tick(t)

	ctx, cancel := context.WithCancel(t.Context())
	st, ok, err := e.store.Stream(ctx, token, cur, 1000)
	require.NoError(t, err)
	require.True(t, ok)
	defer st.Close() // a failure below must not leave the pool waiting for its connection
	var got []uuid.UUID
	for range 2 {
		b, err := st.Next(700)
		require.NoError(t, err)
		require.True(t, b.Partial)
		got = append(got, ids(b.Events)...)
		cur, err = e.store.Move(ctx, token, cur, b, nil, nil)
		require.NoError(t, err)
	}
	cancel() // killed: the third piece is never moved (Next may still hand out rows pgx had received)
	st.Close()
	st.Close()
	require.Equal(t, want[:1400], got)

	emit(t, e.db.Pool, "k", 1) // a newer tick does not change the open batch
	e.tick(t)
	require.NoError(t, e.store.ReleaseGroup(t.Context(), "g", token))
	token2 := uuid.New()
	cur2, err := e.store.TakeGroup(t.Context(), "g", "other", token2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, batch.Cursor{Group: "g", LastTick: cur.LastTick, BatchTick: target, BatchSeq: cur.BatchSeq}, cur2)
	st2, ok, err := e.store.Stream(t.Context(), token2, cur2, 1000)
	require.NoError(t, err)
	require.True(t, ok)
	defer st2.Close()
	require.Equal(t, target, st2.To.ID)
	rest, _, cur2 := streamPieces(t, e.store, token2, cur2, st2, 700)
	require.Equal(t, want[1400:], rest, "the rest once, in seq order")
	require.Equal(t, batch.Cursor{Group: "g", LastTick: target}, cur2)
}

// A stream read ahead (ReadStream) records nothing; the move of the
// last piece before it records its target (Outcome.Ahead), and a stream
// that failed after Stream recorded its target opens again.
func TestStreamReadAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	first := emit(t, e.db.Pool, "k", 3)
	e.tick(t)
	st, ok, err := e.store.Stream(ctx, token, cur, 10)
	require.NoError(t, err)
	require.True(t, ok)
	b, err := st.Next(10)
	require.NoError(t, err)
	require.False(t, b.Partial)
	require.Equal(t, first, ids(b.Events))
	st.Close()

	second := emit(t, e.db.Pool, "k", 3)
	aheadTick := e.tick(t)
	ahead, ok, err := e.store.ReadStream(ctx, store.Next(cur, b), 10)
	require.NoError(t, err)
	require.True(t, ok)
	defer ahead.Close()
	next, err := e.store.MoveWith(ctx, token, cur, b, store.Outcome{Ahead: ahead.Batch()})
	require.NoError(t, err)
	require.Equal(t, batch.Cursor{Group: "g", LastTick: b.To.ID, BatchTick: aheadTick}, next)
	p, err := ahead.Next(2)
	require.NoError(t, err)
	require.Equal(t, second[:2], ids(p.Events))
	ahead.Close() // dropped: Stream opens it again from the recorded cursor

	again, ok, err := e.store.Stream(ctx, token, next, 10)
	require.NoError(t, err)
	require.True(t, ok)
	defer again.Close()
	got, _, _ := streamPieces(t, e.store, token, next, again, 2)
	require.Equal(t, second, got)

	// Stream records a target once; recording the same one again (a
	// stream whose statement failed after) is allowed.
	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	cur = batch.Cursor{Group: "g", LastTick: aheadTick}
	s1, ok, err := e.store.Stream(ctx, token, cur, 10)
	require.NoError(t, err)
	require.True(t, ok)
	s1.Close()
	s2, ok, err := e.store.Stream(ctx, token, cur, 10)
	require.NoError(t, err, "the same target again")
	require.True(t, ok)
	require.Equal(t, s1.To.ID, s2.To.ID)
	s2.Close()
}
