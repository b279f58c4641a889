package store_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// parkAll reads the next batch and moves it with every event parked
// under its key.
func (e env) parkAll(t *testing.T, token uuid.UUID, cur batch.Cursor) (batch.Cursor, batch.Batch) {
	t.Helper()
	b, ok, err := e.firstPiece(t, token, cur, 100)
	require.NoError(t, err)
	require.True(t, ok)
	var parked []batch.Parked
	keys := map[string]bool{}
	var newKeys []store.ParkedKey
	for _, ev := range b.Events {
		parked = append(parked, batch.Parked{Event: ev, Key: ev.Key(), Code: "permanent", Err: "refused"})
		if !keys[ev.Key()] {
			keys[ev.Key()] = true
			newKeys = append(newKeys, store.ParkedKey{Key: ev.Key(), Code: "permanent", Err: "refused"})
		}
	}
	cur, err = e.store.Move(t.Context(), token, cur, b, parked, newKeys)
	require.NoError(t, err)
	return cur, b
}

func (e env) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), sql).Scan(&n))
	return n
}

func TestRequestsAndUnpark(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	a := emit(t, e.db.Pool, "a", 2)
	emit(t, e.db.Pool, "b", 1)
	emit(t, e.db.Pool, "c", 1)
	e.tick(t)
	cur, _ = e.parkAll(t, token, cur)

	reqs, err := e.store.Requests(ctx, "g")
	require.NoError(t, err)
	require.Empty(t, reqs)
	_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_parked_keys SET replay_requested_at = now() WHERE key = 'a';
		UPDATE `+logName+`_parked_keys SET skip_requested_at = now() WHERE key = 'b'`)
	require.NoError(t, err)
	reqs, err = e.store.Requests(ctx, "g")
	require.NoError(t, err)
	require.ElementsMatch(t, []store.Request{{Key: "a"}, {Key: "b", Skip: true}}, reqs)

	events, err := e.store.ParkedEvents(ctx, "g", []string{"a"})
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, a, []uuid.UUID{events[0].Event.ID, events[1].Event.ID}, "seq order")
	require.Equal(t, map[string]string{"h": "v"}, events[0].Event.Headers)

	// A stale token settles nothing.
	o := store.Outcome{Unpark: []string{"a", "b"}, Clear: []string{"c"}}
	require.ErrorIs(t, e.store.Settle(ctx, uuid.New(), cur, o), store.ErrLeaseLost)
	require.ErrorIs(t, e.store.Settle(ctx, token, batch.Cursor{Group: "g", LastTick: cur.LastTick - 1}, o), store.ErrLeaseLost,
		"a cursor left behind")
	require.Equal(t, 4, e.count(t, `SELECT count(*) FROM `+logName+`_parked`))

	// a is replayed and fails again: its rows are written anew in the
	// same transaction; b is skipped; c's (absent) request is cleared.
	o.Parked = []batch.Parked{{Event: events[0], Key: "a", Code: "permanent", Err: "again"}}
	o.NewKeys = []store.ParkedKey{{Key: "a", Code: "permanent", Err: "again"}}
	require.NoError(t, e.store.Settle(ctx, token, cur, o))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM `+logName+`_parked WHERE key = 'a' AND error = 'again'`))
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM `+logName+`_parked WHERE key = 'b'`))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM `+logName+`_parked WHERE key = 'c'`))
	keys, err := e.store.ParkedKeys(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"a": true, "c": true}, keys)
	reqs, err = e.store.Requests(ctx, "g")
	require.NoError(t, err)
	require.Empty(t, reqs)

	// In a move: the key's rows go with the move.
	_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_parked_keys SET skip_requested_at = now() WHERE key = 'c'`)
	require.NoError(t, err)
	emit(t, e.db.Pool, "d", 1)
	e.tick(t)
	b, _, err := e.firstPiece(t, token, cur, 10)
	require.NoError(t, err)
	_, err = e.store.MoveWith(ctx, uuid.New(), cur, b, store.Outcome{Unpark: []string{"c"}})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM `+logName+`_parked WHERE key = 'c'`))
	_, err = e.store.MoveWith(ctx, token, cur, b, store.Outcome{Unpark: []string{"c"}})
	require.NoError(t, err)
	require.Equal(t, 0, e.count(t, `SELECT count(*) FROM `+logName+`_parked WHERE key = 'c'`))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM `+logName+`_parked_keys`))
}
