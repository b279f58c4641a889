package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

func TestBatchOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cur, token := e.group(t, "g")
	a, b := begin(t, e.db.Pool), begin(t, e.db.Pool)
	idsA := emit(t, a, "a", 2) // lower seq, commits later
	idsB := emit(t, b, "b", 2)
	require.NoError(t, b.Commit(t.Context()))
	e.tick(t)
	got, _, cur := e.drain(t, token, cur, 100)
	require.Equal(t, idsB, got, "only the committed transaction")

	require.NoError(t, a.Commit(t.Context()))
	e.tick(t)
	got, _, _ = e.drain(t, token, cur, 100)
	require.Equal(t, idsA, got, "the late commit in the next batch, once")
}

func TestBatchLongTransactionAcrossTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cur, token := e.group(t, "g")
	long := begin(t, e.db.Pool)
	longIDs := emit(t, long, "long", 3)
	var others []uuid.UUID
	for i := range 20 {
		others = append(others, emit(t, e.db.Pool, fmt.Sprint("k", i), 1)...)
		e.tick(t)
		got, _, next := e.drain(t, token, cur, 100)
		require.Equal(t, others[len(others)-1:], got, "tick %d: only its own commit", i)
		cur = next
	}
	require.NoError(t, long.Commit(t.Context()))
	e.tick(t)
	got, batches, _ := e.drain(t, token, cur, 100)
	require.Equal(t, longIDs, got, "the long transaction, once, after it commits")
	require.Len(t, batches, 1)
}

func TestBatchRollbacksAreNeverRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cur, token := e.group(t, "g")
	rolled := begin(t, e.db.Pool)
	emit(t, rolled, "r", 2)
	require.NoError(t, rolled.Rollback(t.Context()))

	sp := begin(t, e.db.Pool)
	kept := emit(t, sp, "s", 1)
	_, err := sp.Exec(t.Context(), `SAVEPOINT x`)
	require.NoError(t, err)
	emit(t, sp, "s", 2)
	_, err = sp.Exec(t.Context(), `ROLLBACK TO SAVEPOINT x`)
	require.NoError(t, err)
	kept = append(kept, emit(t, sp, "s", 1)...)
	require.NoError(t, sp.Commit(t.Context()))
	e.tick(t)
	got, _, _ := e.drain(t, token, cur, 100)
	require.Equal(t, kept, got)
}

func TestBatchMergesTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cur, token := e.group(t, "g")
	var want []uuid.UUID
	var last int64
	for range 3 {
		want = append(want, emit(t, e.db.Pool, "k", 2)...)
		last = e.tick(t)
	}
	got, batches, next := e.drain(t, token, cur, 100)
	require.Equal(t, want, got)
	require.Len(t, batches, 1, "three ticks, one batch")
	require.Equal(t, cur.LastTick, batches[0].From.ID)
	require.Equal(t, last, batches[0].To.ID)
	require.Equal(t, batch.Cursor{Group: "g", LastTick: last}, next)

	// With a span of 2, a batch stops at the newest tick within 2 events.
	var want2 []uuid.UUID
	for range 3 {
		want2 = append(want2, emit(t, e.db.Pool, "k", 1)...)
		e.tick(t)
	}
	got, batches, _ = e.drain(t, token, next, 2)
	require.Equal(t, want2, got)
	require.Len(t, batches, 2)
	require.Len(t, batches[0].Events, 2)
	require.False(t, batches[0].Partial)
}

func TestBatchPartialResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	want := emit(t, e.db.Pool, "k", 10)
	target := e.tick(t)

	b, ok, err := e.firstPiece(t, token, cur, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, b.Partial)
	require.Len(t, b.Events, 3)
	cur, err = e.store.Move(ctx, token, cur, b, nil, nil)
	require.NoError(t, err)
	require.Equal(t, target, cur.BatchTick)
	require.Equal(t, b.Events[2].Seq, cur.BatchSeq)

	// Newer ticks do not change the open batch's set.
	emit(t, e.db.Pool, "k", 1)
	e.tick(t)

	// A restart: another token takes the group and resumes at batch_seq.
	require.NoError(t, e.store.ReleaseGroup(ctx, "g", token))
	token2 := uuid.New()
	cur2, err := e.store.TakeGroup(ctx, "g", "other", token2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, cur, cur2)
	b2, ok, err := e.firstPiece(t, token2, cur2, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want[3:6], ids(b2.Events))
	require.Equal(t, target, b2.To.ID)

	rest, batches, _ := e.drain(t, token2, cur2, 3)
	require.Equal(t, append(want[3:], rest[len(want)-3:]...), rest)
	require.Equal(t, target, batches[2].To.ID, "the open batch ends at its target")
	require.False(t, batches[2].Partial)
}

func ids(events []batch.Event) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.Event.ID
	}
	return out
}

func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	_, err := e.store.TakeGroup(ctx, "g", "other", uuid.New(), time.Hour)
	require.ErrorIs(t, err, store.ErrGroupBusy)
	_, err = e.store.TakeGroup(ctx, "nope", "other", uuid.New(), time.Hour)
	require.ErrorIs(t, err, store.ErrNoGroup)
	require.ErrorIs(t, e.store.CreateGroup(ctx, "g", store.Oldest), store.ErrGroupExists)

	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	b, ok, err := e.firstPiece(t, token, cur, 10)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_cursors SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	require.ErrorIs(t, e.store.RenewGroup(ctx, "g", token, time.Hour), store.ErrLeaseLost)
	_, err = e.store.Move(ctx, token, cur, b, nil, nil)
	require.ErrorIs(t, err, store.ErrLeaseLost, "an expired lease cannot move the cursor")

	token2 := uuid.New()
	cur2, err := e.store.TakeGroup(ctx, "g", "other", token2, time.Hour)
	require.NoError(t, err)
	_, err = e.store.Move(ctx, token, cur, b, nil, nil)
	require.ErrorIs(t, err, store.ErrLeaseLost, "a stale token cannot move the cursor")
	b2, ok, err := e.firstPiece(t, token2, cur2, 10)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ids(b.Events), ids(b2.Events), "the new holder reads the same batch")
	moved, err := e.store.Move(ctx, token2, cur2, b2, nil, nil)
	require.NoError(t, err)
	_, err = e.store.Move(ctx, token2, cur2, b2, nil, nil)
	require.ErrorIs(t, err, store.ErrLeaseLost, "a move from a position left behind")

	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	_, _, err = e.firstPiece(t, token, moved, 10)
	require.ErrorIs(t, err, store.ErrLeaseLost, "a stale token cannot open a batch")
}

func TestParkedInMove(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	emit(t, e.db.Pool, "k", 2)
	e.tick(t)
	b, _, err := e.firstPiece(t, token, cur, 10)
	require.NoError(t, err)
	parked := []batch.Parked{{Event: b.Events[1], Key: "k", Code: "permanent", Err: "refused"}}
	_, err = e.store.Move(ctx, token, cur, b, parked, []store.ParkedKey{{Key: "k", Code: "permanent", Err: "refused"}})
	require.NoError(t, err)
	keys, err := e.store.ParkedKeys(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"k": true}, keys)
	var id, headers string
	var payload []byte
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT id::text, headers::text, payload FROM `+logName+`_parked WHERE grp = 'g'`).
		Scan(&id, &headers, &payload))
	require.Equal(t, b.Events[1].Event.ID.String(), id)
	require.Equal(t, `{"h": "v"}`, headers)
	require.Equal(t, []byte{1}, payload)

	require.NoError(t, e.store.DropGroup(ctx, "g"))
	keys, err = e.store.ParkedKeys(ctx, "g")
	require.NoError(t, err)
	require.Empty(t, keys)
	require.ErrorIs(t, e.store.DropGroup(ctx, "g"), store.ErrNoGroup)
}

func TestBackwardsDetection(t *testing.T) {
	t.Parallel()
	t.Run("a rewritten target tick", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx := t.Context()
		cur, token := e.group(t, "g")
		emit(t, e.db.Pool, "k", 1)
		id := e.tick(t)
		_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET snapshot = '1:1:'::pg_snapshot WHERE tick_id = $1`, id)
		require.NoError(t, err)
		_, _, err = e.firstPiece(t, token, cur, 10)
		require.ErrorIs(t, err, store.ErrSnapshotBackwards)
		require.NoError(t, e.store.StopGroup(ctx, "g", token, err.Error()))
		_, err = e.store.TakeGroup(ctx, "g", "test", token, time.Hour)
		require.ErrorIs(t, err, store.ErrGroupStopped)
	})
	t.Run("ticks rolled back under a running reader", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx := t.Context()
		cur, token := e.group(t, "g")
		emit(t, e.db.Pool, "k", 1)
		e.tick(t)
		_, _, cur = e.drain(t, token, cur, 10)
		// A restore of an older backup: the ticks and the cursor go back.
		_, err := e.db.Pool.Exec(ctx, `DELETE FROM `+logName+`_ticks WHERE tick_id > 1`)
		require.NoError(t, err)
		_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_cursors SET last_tick = 1`)
		require.NoError(t, err)
		_, err = e.store.TakeGroup(ctx, "g", "test", token, time.Hour)
		require.ErrorIs(t, err, store.ErrSnapshotBackwards)
		_ = cur
	})
	t.Run("another system identifier", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx := t.Context()
		cur, token := e.group(t, "g")
		emit(t, e.db.Pool, "k", 1)
		id := e.tick(t)
		_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET sysid = sysid + 1 WHERE tick_id = $1`, id)
		require.NoError(t, err)
		b, ok, err := e.firstPiece(t, token, cur, 10)
		require.NoError(t, err, "pg_upgrade keeps the ids: the snapshots still hold")
		require.True(t, ok)
		require.Len(t, b.Events, 1)
	})
}

// TestConcurrentWritersNoneSkippedNoneTwice runs writers that commit,
// roll back or roll back a savepoint at random moments on connections of
// their own while a ticker ticks and a reader reads: every committed
// event is read exactly once, no rolled-back one ever.
func TestConcurrentWritersNoneSkippedNoneTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	pool := e.db.NewPool(t, 12)

	const writers, rounds = 6, 15
	var mu sync.Mutex
	committed := map[uuid.UUID]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for r := range rounds {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				key := fmt.Sprint("w", w)
				kept := emit(t, tx, key, 1+rng.IntN(3))
				if rng.IntN(4) == 0 {
					_, _ = tx.Exec(ctx, `SAVEPOINT s`)
					emit(t, tx, key, 2)
					_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // interleave, not a wait for anything
				if r%5 == 4 {
					_ = tx.Rollback(ctx)
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, id := range kept {
					committed[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[uuid.UUID]int{}
	var st *store.Stream // the batch being read: a piece per call, with ticks in between
	read := func() bool {
		if st == nil {
			var ok bool
			var err error
			st, ok, err = e.store.Stream(ctx, token, cur, 7)
			require.NoError(t, err)
			if !ok {
				return false
			}
			t.Cleanup(st.Close)
		}
		b, err := st.Next(7)
		require.NoError(t, err)
		for _, ev := range b.Events {
			seen[ev.Event.ID]++
		}
		cur, err = e.store.Move(ctx, token, cur, b, nil, nil)
		require.NoError(t, err)
		if !b.Partial {
			st.Close()
			st = nil
		}
		return true
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		_, _, err := e.store.Tick(ctx, e.ticker, 0)
		require.NoError(t, err)
		read()
	}
	e.tick(t)
	for read() {
	}
	for id, n := range seen {
		require.True(t, committed[id], "read an event never committed")
		require.Equal(t, 1, n, "read twice")
	}
	require.Len(t, seen, len(committed), "every committed event read")
}

// TestMoveRecordsTheBatchReadAhead reads the next batch (ReadStream)
// while one is published and records its target with the move
// (Outcome.Ahead): a restart resumes that batch, not a larger one merged
// from newer ticks.
func TestMoveRecordsTheBatchReadAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	first := emit(t, e.db.Pool, "k", 2)
	e.tick(t)
	b, ok, err := e.firstPiece(t, token, cur, 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first, ids(b.Events))
	second := emit(t, e.db.Pool, "k", 2)
	aheadTick := e.tick(t)

	ahead, ok, err := e.store.ReadStream(ctx, store.Next(cur, b), 2)
	require.NoError(t, err)
	require.True(t, ok)
	defer ahead.Close()
	p, err := ahead.Next(2)
	require.NoError(t, err)
	require.Equal(t, second, ids(p.Events))
	emit(t, e.db.Pool, "k", 1)
	e.tick(t) // within the span of neither; merging would change nothing, but a restart must not re-pick

	_, err = e.store.MoveWith(ctx, token, cur, b, store.Outcome{Ahead: batch.Batch{From: batch.Tick{ID: 99}, To: batch.Tick{ID: 100}}})
	require.Error(t, err, "a batch read ahead from elsewhere")
	next, err := e.store.MoveWith(ctx, token, cur, b, store.Outcome{Ahead: ahead.Batch()})
	require.NoError(t, err)
	require.Equal(t, batch.Cursor{Group: "g", LastTick: b.To.ID, BatchTick: aheadTick}, next)

	require.NoError(t, e.store.ReleaseGroup(ctx, "g", token))
	token2 := uuid.New()
	cur2, err := e.store.TakeGroup(ctx, "g", "other", token2, time.Hour)
	require.NoError(t, err)
	require.Equal(t, next, cur2)
	again, ok, err := e.firstPiece(t, token2, cur2, 100)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, second, ids(again.Events), "the batch read ahead, as recorded")
	_, err = e.store.Move(ctx, token2, cur2, again, nil, nil)
	require.NoError(t, err)
}
