package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/lease"
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
	pool, err := pgxpool.New(context.Background(), "postgres://bench@127.0.0.1:1/none")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	d, err := New(pool, Config{BatchSize: batch, Concurrency: batch, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Handle("x", func(context.Context, outbox.Event) error { return nil }); err != nil {
		b.Fatal(err)
	}
	d.dbCtx, d.workCtx = context.Background(), context.Background()
	quit := make(chan struct{})
	defer close(quit)
	d.workers = newWorkers(quit)
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
		d.start(lease.Batch{Token: uuid.New(), Events: events, Started: started}, time.Now(), 0)
		for d.pendingCount() < batch {
			<-d.flush
		}
		items, _, _ := d.takePending()
		if _, params := d.outcomes(items); len(params.Sent) != batch {
			b.Fatalf("%d sent outcomes, want %d", len(params.Sent), batch)
		}
		d.removeItems(items)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
}

func (d *Dispatcher) pendingCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}
