package read_test

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
	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// countingDB counts the events statements run on its DB that returned
// rows, and their rows.
type countingDB struct {
	store.DB
	withRows, rows atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := c.DB.Query(ctx, sql, args...)
	if err != nil || !strings.Contains(sql, "pg_visible_in_snapshot") {
		return rows, err
	}
	return &countedRows{Rows: rows, db: c}, nil
}

// countedRows counts its rows into db.
type countedRows struct {
	pgx.Rows
	db   *countingDB
	seen bool
}

func (r *countedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		if !r.seen {
			r.seen = true
			r.db.withRows.Add(1)
		}
		r.db.rows.Add(1)
	}
	return ok
}

// bigTransaction commits n events of key in one transaction and returns
// their ids in seq order.
func bigTransaction(t *testing.T, e env, key string, n int) []uuid.UUID {
	t.Helper()
	tx, err := e.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var ids []uuid.UUID
	for done := 0; done < n; done += 10_000 {
		ids = append(ids, relaytest.Emit(t, tx, key, min(10_000, n-done))...)
	}
	require.NoError(t, tx.Commit(t.Context()))
	return ids
}

// sameIDs fails unless got is want, naming the first difference only.
func sameIDs(t *testing.T, want, got []uuid.UUID, msg string) {
	t.Helper()
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("%s: event %d is %s, want %s", msg, i, got[i], want[i])
		}
	}
	require.Equal(t, len(want), len(got), msg)
}

func eventIDs(events []batch.Event) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.Event.ID
	}
	return out
}

// A batch of one huge transaction is read by one events statement and
// published in pieces of MaxBatch, each moved, in seq order.
func TestReaderStreamsAHugeTransactionInPieces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &countingDB{DB: e.db.Pool}
	s, err := store.New(db, e.table)
	require.NoError(t, err)
	pub := newFake()
	moved := make(chan read.BatchStats, 1000)
	r := read.New(read.Config{Store: s, Lanes: pub, Group: "g", Owner: "r", MaxBatch: 1000, Wake: e.wake,
		PollInterval: time.Hour, OnBatch: func(b read.BatchStats) {
			if b.Events > 0 { // not the empty batches of ticks made while the transaction ran
				moved <- b
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(cancel)

	want := bigTransaction(t, e, "k", 20_000)
	var stats []read.BatchStats
	for len(stats) < 20 {
		select {
		case b := <-moved:
			stats = append(stats, b)
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
	sameIDs(t, want, eventIDs(pub.snapshot()), "every event once, in seq order")
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int64(1), db.withRows.Load(), "one events statement read them")
	require.Equal(t, int64(len(want)), db.rows.Load(), "each row once")
	require.Empty(t, moved, "20 cursor moves")
	for i, b := range stats {
		require.Equal(t, 1000, b.Events)
		require.Equal(t, i < 19, b.Partial)
	}
	var last int64
	var batchTick *int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT last_tick, batch_tick FROM `+relaytest.LogName+`_cursors`).
		Scan(&last, &batchTick))
	require.Equal(t, stats[19].To, last)
	require.Nil(t, batchTick)
}

// A reader killed (cancelled) mid-stream leaves the cursor at the last
// piece moved; the next reader streams the rest of the batch once, from
// batch_seq on: nothing is lost.
func TestReaderKilledMidStreamResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	calls := 0
	kill := make(chan func(), 1)
	pub.onPublish = func(events []batch.Event) {
		if len(events) == 0 {
			return // the empty batches of ticks made while the transaction ran
		}
		if calls++; calls == 3 {
			(<-kill)() // killed while the third piece publishes: it is not moved
		}
	}
	stop, result := e.runReader(t, pub, read.Config{MaxBatch: 500})
	kill <- stop
	want := bigTransaction(t, e, "k", 5000)
	require.NoError(t, <-result)
	first := pub.snapshot()
	sameIDs(t, want[:1500], eventIDs(first), "three pieces published")

	var batchSeq int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT batch_seq FROM `+relaytest.LogName+`_cursors`).Scan(&batchSeq))
	require.Equal(t, first[999].Seq, batchSeq, "the cursor records the second piece's last seq")

	pub2 := newFake()
	e.runReader(t, pub2, read.Config{Owner: "r2", MaxBatch: 500})
	waitPublished(t, pub2, 4000)
	sameIDs(t, want[1000:], eventIDs(pub2.snapshot()), "the rest once, from batch_seq on")
}
