package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// BenchmarkClaimComplete measures one dispatcher cycle against PostgreSQL:
// claim a batch of 100 due rows, then complete them all as sent. Inserting
// the rows is not timed. SENT rows accumulate, as they do in production.
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

		start := time.Now()
		claimed, err := e.store.Claim(ctx, e.db.Pool, lease.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute})
		if err != nil || len(claimed.Events) != batch {
			b.Fatalf("claim: %d rows, %v", len(claimed.Events), err)
		}
		claimTime += time.Since(start)
		start = time.Now()
		res, err := e.store.Complete(ctx, e.db.Pool, lease.CompleteParams{Sent: claimed.Refs()})
		if err != nil || len(res.Sent) != batch {
			b.Fatalf("complete: %d sent, %v", len(res.Sent), err)
		}
		completeTime += time.Since(start)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(claimTime.Nanoseconds())/float64(b.N), "claim-ns/op")
	b.ReportMetric(float64(completeTime.Nanoseconds())/float64(b.N), "complete-ns/op")
}
