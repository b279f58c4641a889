package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/workers"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// BenchmarkDispatchInProcess measures what the dispatcher does per event
// besides SQL: hold a claimed batch of 1,000 events, run a no-op handler
// for each, hand the outcomes to the completer, lay out the completion's
// parameters and let the events go. The pool never connects.
//
//	go test -run '^$' -bench DispatchInProcess -benchmem ./dispatcher/
func BenchmarkDispatchInProcess(b *testing.B) {
	const batch = 1000
	d := offlineDispatcher(b, Config{BatchSize: batch, Concurrency: batch})
	if err := d.Handle("x", func(context.Context, outbox.Event) error { return nil }); err != nil {
		b.Fatal(err)
	}
	d.dbCtx, d.workCtx = context.Background(), context.Background()
	quit := make(chan struct{})
	defer close(quit)
	startRunner(d, workers.New(quit, clock.Real()))
	d.completer = newCompleter(context.Background(), d, &sync.Mutex{})
	events := make([]outbox.Event, batch)
	for i := range events {
		events[i] = outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Payload: []byte(`{}`), Attempt: 1}
	}
	started := make([]bool, batch)
	for i := range started {
		started[i] = true
	}
	b.ReportAllocs()
	for b.Loop() {
		// What the claimer does with a claimed batch (internal/claim's
		// dispatch), with no slots taken.
		items, _ := d.held.Add(d.workCtx, lease.Batch{Token: uuid.New(), Events: events, Started: started}, time.Now(), 0)
		d.mode.Dispatch(items)
		for d.held.Waiting() < batch {
			<-d.held.OutcomesReady()
		}
		done, _, _ := d.held.TakeOutcomes(0)
		if _, params := d.completer.Params(done); len(params.Sent) != batch {
			b.Fatalf("%d sent outcomes, want %d", len(params.Sent), batch)
		}
		d.held.Remove(done)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
}

// offlineDispatcher returns a quiet dispatcher of cfg on a pool that never
// connects, for benchmarks of what it does besides SQL.
func offlineDispatcher(b *testing.B, cfg Config) *Dispatcher {
	pool, err := pgxpool.New(context.Background(), "postgres://bench@127.0.0.1:1/none")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(pool, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
