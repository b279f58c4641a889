package run

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/workers"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// recPublisher counts what it publishes, always successfully.
type recPublisher struct {
	mu sync.Mutex
	n  int
}

func (p *recPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	p.n += len(msgs)
	p.mu.Unlock()
	return make([]error, len(msgs))
}

func (p *recPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// A batch's spawner stops waiting for a handler slot once the batch's own
// workers have taken every item: a slot that frees goes to whoever asked
// first (here another batch's long handler), and the batch's successful
// events must not wait for a slot none of them needs before they are
// published and let go. No database: the batch is built in memory and
// runBatch is called directly.
func TestSpawnerStopsWaitingOnceEveryItemIsTaken(t *testing.T) {
	t.Parallel()
	pub := &recPublisher{}
	d := testRunner(t, Config{Concurrency: 2, Publisher: pub,
		RouteFunc: func(outbox.Event) string { return "topic" }})
	quit := make(chan struct{})
	defer close(quit)

	e0 := outbox.Event{ID: uuid.New(), Type: "x"}
	e1 := outbox.Event{ID: uuid.New(), Type: "x"}
	gate, entered := make(chan struct{}), make(chan struct{})
	var ran atomic.Int32
	d.Start(workers.New(quit, clock.Real()), map[string]outbox.Handler{"x": func(_ context.Context, e outbox.Event) error {
		if e.ID == e0.ID {
			close(entered)
			<-gate
		}
		ran.Add(1)
		return nil
	}}, nil)

	d.slots <- struct{}{} // a long handler of another batch holds one slot
	d.slots <- struct{}{} // the claim took the other one for e0 (startsFor)
	// Another batch's spawner waits for a slot; its worker will run a long
	// handler in it. It queued on d.slots before this batch's spawner.
	competitorGot, competitorDone, competitorExit := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		d.slots <- struct{}{}
		close(competitorGot)
		<-competitorDone
		<-d.slots
		close(competitorExit)
	}()
	time.Sleep(50 * time.Millisecond)

	items, given := d.held.Add(context.Background(), lease.Batch{
		Token: uuid.New(), Events: []outbox.Event{e0, e1}, Started: []bool{true, true},
	}, time.Now(), 1)
	require.Equal(t, 1, given)
	done := make(chan struct{})
	go func() { d.runBatch(items); close(done) }()
	<-entered
	time.Sleep(50 * time.Millisecond) // the spawner waits for a slot for e1

	close(gate)
	testctx.Await(t, "the batch's worker to run e1 too once e0 returns", func() bool { return ran.Load() == 2 })
	<-competitorGot // the worker's slot went to the other batch
	// The batch's events need no handler slot: they are published while
	// the other batch's handler still holds the slot.
	testctx.Await(t, "the batch's events published without a handler slot", func() bool { return pub.count() == 2 })

	close(competitorDone) // the other batch's handler returns
	<-done
	<-competitorExit
	<-d.slots // the long handler returns
	require.Zero(t, len(d.slots))
}
