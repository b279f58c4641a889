package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/relay"
)

// countingNop acks every message and counts them.
type countingNop struct{ n atomic.Int64 }

func (p *countingNop) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

// BenchmarkRelayThroughput drains a backlog of 10,000 events, written in
// one transaction before the relay starts (so its first tick holds them
// all), to a publisher that acks at once: a new group and relay each
// iteration, timed from Start until every event is recorded published.
// It reports ns/event; MaxBatch 1,000 reads the tick in ten pieces,
// 10,000 in one.
func BenchmarkRelayThroughput(b *testing.B) {
	const backlog = 10_000
	db, log := relaytest.NewLog(b)
	pool := db.NewPool(b, 8)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, maxBatch := range []int{1000, backlog} {
		b.Run(fmt.Sprintf("maxbatch=%d", maxBatch), func(b *testing.B) {
			ctx := testctx.New(b)
			var elapsed time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				group := fmt.Sprintf("b%d-%d", maxBatch, i)
				if err := relay.CreateGroup(ctx, pool, log, group, relay.Latest); err != nil {
					b.Fatal(err)
				}
				relaytest.Emit(b, pool, "", backlog)
				pub := &countingNop{}
				r, err := relay.New(relay.Config{Pool: pool, Log: log, Group: group, Owner: "bench", Publisher: pub,
					MaxBatch: maxBatch, Logger: quiet, NoRetention: true})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := r.Start(ctx); err != nil {
					b.Fatal(err)
				}
				awaitPublished(b, r, backlog)
				elapsed += time.Since(start)
				b.StopTimer()
				if err := r.Stop(ctx); err != nil {
					b.Fatal(err)
				}
				if got := pub.n.Load(); got != backlog {
					b.Fatalf("published %d messages, want %d", got, backlog)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(i*backlog), "ns/event")
		})
	}
}

// awaitPublished polls the relay's Stats until it recorded n events
// published; a relay that stops first fails the benchmark.
func awaitPublished(b *testing.B, r *relay.Relay, n uint64) {
	b.Helper()
	for r.Stats().Published < n {
		select {
		case <-r.Done():
			b.Fatalf("relay stopped after %d of %d events: %v", r.Stats().Published, n, r.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
