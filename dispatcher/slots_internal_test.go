package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

// Every handler slot a claim takes for its marked events, or an event
// takes to run, is given back: with handlers, publish-only events and
// events with neither in the same batches, and in both marking modes (the
// first claims mark exactly; later ones, handlers having proved quick,
// mark everything), no slot is held once the table is drained.
func TestSlotsAreGivenBack(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	for i, typ := range []string{"handled", "published", "neither"} {
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type, payload)
			SELECT gen_random_uuid(), $1, '\x7b7d' FROM generate_series(1, 300)`, typ)
		require.NoError(t, err, "type %d", i)
	}
	pub := &countingPublisher{}
	d, err := New(db.NewPool(t, 8), Config{
		Table: db.Table(), PollInterval: 20 * time.Millisecond, Concurrency: 4, BatchSize: 50,
		Publisher: pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RouteFunc: func(e outbox.Event) string {
			if e.Type == "neither" {
				return ""
			}
			return "topic"
		},
		Backoff: outbox.Backoff{Initial: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, d.Handle("handled", func(context.Context, outbox.Event) error { return nil }))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	budget := testctx.New(t)
	for s := d.Stats(); s.Sent+s.Retried+s.Failed < 600 || s.Unroutable < 300; s = d.Stats() { // "neither" is released, not FAILED
		require.NoError(t, budget.Err(), "still waiting for every event settled: %+v", d.Stats())
		time.Sleep(20 * time.Millisecond)
	}
	testctx.Await(t, "nothing in flight", func() bool { return d.Stats().InFlight == 0 })
	require.Zero(t, d.runner.SlotsTaken(), "handler slots held with nothing in flight")
	require.NoError(t, d.Stop(context.Background()))
	require.NoError(t, <-errc)
	require.Zero(t, d.runner.SlotsTaken())
	require.Equal(t, int64(600), pub.n.Load())
}
