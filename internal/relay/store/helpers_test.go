package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// env is one test's schema with a migrated log, a Store on it and the
// ticker's lease held by ticker.
type env struct {
	db     *testdb.DB
	store  *store.Store
	ticker uuid.UUID
}

const logName = relaytest.LogName

func newEnv(t *testing.T) env {
	t.Helper()
	db, table := relaytest.NewLog(t)
	s, err := store.New(db.Pool, table)
	require.NoError(t, err)
	e := env{db: db, store: s, ticker: uuid.New()}
	held, err := s.TakeTicker(t.Context(), "test", e.ticker, time.Hour)
	require.NoError(t, err)
	require.True(t, held)
	return e
}

// tick records a tick whether needed or not and returns its id.
func (e env) tick(t *testing.T) int64 {
	t.Helper()
	id, made, err := e.store.Tick(t.Context(), e.ticker, 0)
	require.NoError(t, err)
	require.True(t, made)
	return id
}

// emit inserts n events of key on q and returns their ids.
func emit(t *testing.T, q relaytest.Querier, key string, n int) []uuid.UUID {
	t.Helper()
	return relaytest.Emit(t, q, key, n)
}

// begin starts a transaction on a connection of its own.
func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// group creates group (Latest) and takes it for a new token.
func (e env) group(t *testing.T, name string) (batch.Cursor, uuid.UUID) {
	t.Helper()
	require.NoError(t, e.store.CreateGroup(t.Context(), name, store.Latest))
	token := uuid.New()
	cur, err := e.store.TakeGroup(t.Context(), name, "test", token, time.Hour)
	require.NoError(t, err)
	return cur, token
}

// firstPiece opens the group's next batch as a stream of span n and
// returns its first piece of at most n events (Partial when more follow),
// then closes the stream. ok is false when there is no tick after cur's.
func (e env) firstPiece(t *testing.T, token uuid.UUID, cur batch.Cursor, n int) (batch.Batch, bool, error) {
	t.Helper()
	st, ok, err := e.store.Stream(t.Context(), token, cur, n)
	if err != nil || !ok {
		return batch.Batch{}, ok, err
	}
	defer st.Close()
	b, err := st.Next(n)
	return b, err == nil, err
}

// drain streams batches of span maxBatch, each read in pieces of
// maxBatch with a move after each piece, until no tick is left, and
// returns the ids read, in order, the pieces and the cursor.
func (e env) drain(t *testing.T, token uuid.UUID, cur batch.Cursor, maxBatch int) ([]uuid.UUID, []batch.Batch, batch.Cursor) {
	t.Helper()
	var ids []uuid.UUID
	var pieces []batch.Batch
	for {
		st, ok, err := e.store.Stream(t.Context(), token, cur, maxBatch)
		require.NoError(t, err)
		if !ok {
			return ids, pieces, cur
		}
		t.Cleanup(st.Close) // should a require below fail: the pool waits for its connection
		got, more, next := streamPieces(t, e.store, token, cur, st, maxBatch)
		st.Close()
		ids, pieces, cur = append(ids, got...), append(pieces, more...), next
	}
}

// drainAll is drain with a large batch, for tests that need only the
// cursor moved.
func (e env) drainAll(t *testing.T, token uuid.UUID, cur batch.Cursor) batch.Cursor {
	t.Helper()
	_, _, cur = e.drain(t, token, cur, 1000)
	return cur
}
