package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// BenchmarkBatchRead reads one batch of n events (store.ReadStream: the
// ticks, their checks and the events statement, scanned into
// batch.Events by one Stream.Next) against the test database, and
// reports ns/event.
func BenchmarkBatchRead(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchBatchRead(b, n) })
	}
}

func benchBatchRead(b *testing.B, n int) {
	ctx := context.Background()
	db, table := relaytest.NewLog(b)
	s, err := store.New(db.Pool, table)
	if err != nil {
		b.Fatal(err)
	}
	ticker := uuid.New()
	if _, err := s.TakeTicker(ctx, "bench", ticker, time.Hour); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateGroup(ctx, "g", store.Latest); err != nil {
		b.Fatal(err)
	}
	cur, err := s.TakeGroup(ctx, "g", "bench", uuid.New(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for done := 0; done < n; done += 10_000 { // statements of at most 10,000 rows
		relaytest.Emit(b, db.Pool, "k"+strconv.Itoa(done), min(10_000, n-done))
	}
	if _, _, err := s.Tick(ctx, ticker, 0); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE `+table.String()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if got, err := readBatch(ctx, s, cur, n); err != nil || got != n {
			b.Fatalf("read %d events: %v", got, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}

// readBatch reads the batch after cur as one piece of at most n events
// and returns how many it held.
func readBatch(ctx context.Context, s *store.Store, cur batch.Cursor, n int) (int, error) {
	st, ok, err := s.ReadStream(ctx, cur, n)
	if err != nil || !ok {
		return 0, err
	}
	defer st.Close()
	b, err := st.Next(n)
	return len(b.Events), err
}
