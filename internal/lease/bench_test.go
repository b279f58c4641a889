package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// BenchmarkClaimComplete measures one dispatcher cycle against PostgreSQL:
// claim a batch of 100 due rows, then complete them all as sent. Inserting
// the rows is not timed. SENT rows accumulate in the SENT history, as they
// do in production.
//
//	go test -run '^$' -bench BenchmarkClaimComplete -benchtime 200x ./lease/
func BenchmarkClaimComplete(b *testing.B) {
	const batch = 100
	e := newEnv(b)
	ctx := context.Background()
	ids := make([]uuid.UUID, batch)
	var claimTime, completeTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7())
		}
		_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
			SELECT id, 'bench.event', '{"order":42}'::bytea FROM unnest($1::uuid[]) AS id`, ids)
		require.NoError(b, err)
		b.StartTimer()

		claimed, completed := claimComplete(b, e, lease.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute})
		claimTime += claimed
		completeTime += completed
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(claimTime.Nanoseconds())/float64(b.N), "claim-ns/op")
	b.ReportMetric(float64(completeTime.Nanoseconds())/float64(b.N), "complete-ns/op")
}

// BenchmarkOrderedClaimComplete compares the ordered claim with the
// unordered one: claim 1,000 due keyed rows in one batch and complete
// them all as sent, with the rows spread over 1, 100 or 10,000 keys (one
// run of 1,000, runs of 10, one row per key). Inserting is not timed.
//
//	go test -run '^$' -bench BenchmarkOrderedClaimComplete -benchtime 50x ./internal/lease/
func BenchmarkOrderedClaimComplete(b *testing.B) {
	const batch = 1000
	for _, ordered := range []bool{false, true} {
		for _, keys := range []int{1, 100, 10000} {
			name := fmt.Sprintf("ordered=%t/keys=%d", ordered, keys)
			b.Run(name, func(b *testing.B) {
				var opts []testdb.MigrateOption
				if ordered { // the ordered claim reads the order index
					opts = append(opts, testdb.KeyOrder)
				}
				e := newEnv(b, opts...)
				ctx := context.Background()
				ids := make([]uuid.UUID, batch)
				names := make([]string, batch)
				var claimTime, completeTime time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for n := range b.N {
					b.StopTimer()
					for i := range ids {
						ids[i] = uuid.Must(uuid.NewV7())
						names[i] = "key-" + strconv.Itoa((n*batch+i)%keys)
					}
					_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload, partition_key)
						SELECT id, 'bench.event', '{"order":42}'::bytea, k FROM unnest($1::uuid[], $2::text[]) AS x(id, k)`, ids, names)
					require.NoError(b, err)
					b.StartTimer()

					claimed, completed := claimComplete(b, e, lease.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute,
						Ordered: ordered, BlockFailed: true})
					claimTime += claimed
					completeTime += completed
				}
				b.ReportMetric(float64(claimTime.Nanoseconds())/float64(b.N), "claim-ns/op")
				b.ReportMetric(float64(completeTime.Nanoseconds())/float64(b.N), "complete-ns/op")
			})
		}
	}
}

// claimComplete claims p.Limit rows with p, which must all be due, and
// completes them as sent; it returns how long each statement took.
func claimComplete(b *testing.B, e env, p lease.ClaimParams) (claimTime, completeTime time.Duration) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	claimed, err := e.store.Claim(ctx, e.db.Pool, p)
	if err != nil || len(claimed.Events) != p.Limit {
		b.Fatalf("claim: %d rows, %v", len(claimed.Events), err)
	}
	claimTime = time.Since(start)
	start = time.Now()
	res, err := e.store.Complete(ctx, e.db.Pool, lease.CompleteParams{Sent: claimed.Refs()})
	if err != nil || len(res.Sent) != p.Limit {
		b.Fatalf("complete: %d sent, %v", len(res.Sent), err)
	}
	return claimTime, time.Since(start)
}
