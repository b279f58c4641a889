package dispatcher_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// idRecorder records event IDs in the order they arrive.
type idRecorder struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (r *idRecorder) add(ids ...uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, ids...)
}

func (r *idRecorder) has(id uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.ids, id)
}

func (r *idRecorder) all() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// idPublisher records the IDs it publishes, in order.
type idPublisher struct{ idRecorder }

func (p *idPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	for _, m := range msgs {
		p.add(m.Event.ID)
	}
	return make([]error, len(msgs))
}

// With Concurrency 1 and no per-key ordering a dispatcher hands its events
// out in claim order, across batches too: a later claim that returns first
// waits for the earlier one. The hook holds the claim of the second batch
// until the third batch's first event was handed out (or a bound passes:
// then no such claim ran meanwhile).
func TestConcurrencyOneHandsOutInClaimOrder(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, publishOnly bool) {
		db := testdb.NewMigrated(t)
		ids := insertEvents(t, db, "ev", 20)
		out := &idRecorder{}
		cfg := baseConfig(db)
		cfg.Concurrency, cfg.BatchSize = 1, 5
		if publishOnly {
			pub := &idPublisher{}
			cfg.Publisher, out = pub, &pub.idRecorder
		}
		dispatcher.SetClaimHook(&cfg, func(events []outbox.Event) {
			if events[0].ID != ids[5] {
				return
			}
			deadline := time.Now().Add(3 * time.Second)
			for !out.has(ids[10]) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		})
		d, err := dispatcher.New(db.NewPool(t, 6), cfg)
		require.NoError(t, err)
		if !publishOnly {
			require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
				out.add(e.ID)
				return nil
			}))
		}
		runDispatcher(t, d)
		waitFor(t, "every event handed out", func() bool { return len(out.all()) == len(ids) })
		require.Equal(t, positions(ids, ids), positions(ids, out.all()), "positions in claim order")
	}
	t.Run("handlers", func(t *testing.T) { t.Parallel(); run(t, false) })
	t.Run("publish-only", func(t *testing.T) { t.Parallel(); run(t, true) })
}

// positions returns the index in ids of each of got (-1 for one not in
// ids): a readable form of an order of events.
func positions(ids, got []uuid.UUID) []int {
	pos := make([]int, len(got))
	for i, id := range got {
		pos[i] = slices.Index(ids, id)
	}
	return pos
}

// Within a batch too, with Concurrency 1: a publish-only event waits for
// the handlers of the events claimed before it. The first handler waits
// until the publish-only event was handed out (or a bound passes: then
// it was not handed out meanwhile); before, it was published at once,
// ahead of the second handler.
func TestConcurrencyOneMixedBatchInClaimOrder(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := append(insertEvents(t, db, "h", 2), insertEvents(t, db, "p", 1)...)
	pub := &idPublisher{}
	out := &pub.idRecorder
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.BatchSize = 1, 10
	cfg.Publisher, cfg.PublishTypes = pub, []string{"p"}
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("h", func(_ context.Context, e outbox.Event) error {
		out.add(e.ID)
		deadline := time.Now().Add(3 * time.Second)
		for e.ID == ids[0] && !out.has(ids[2]) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}))
	runDispatcher(t, d)
	waitFor(t, "every event handed out", func() bool { return len(out.all()) == len(ids) })
	require.Equal(t, []int{0, 1, 2}, positions(ids, out.all()), "positions in claim order")
}
