package run

import (
	"sync"

	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Claim order with Concurrency 1. A dispatcher without per-key ordering
// and with one handler slot hands out its events in claim order, across
// batches too: its claims run one at a time (whatever Claimers says), so
// that each returns the events after those of the one before, and each
// batch waits for the batch claimed before it to hand out all its events
// (its handlers taken, its publishes sent) before it starts; within a
// batch, publish-only events wait for the handlers of the events claimed
// before them (see runInSegments). Claims still run ahead of the
// handlers: a batch is claimed while the one before runs.

// turns lines the batches of a dispatcher up in claim order.
type turns struct {
	mu   sync.Mutex
	last chan struct{} // closed when the latest batch has handed out its events; nil before the first
}

// take returns the turn of the next batch: prev is closed when the batch
// before it is done (nil for none), and the batch closes done when it is.
func (t *turns) take() (prev <-chan struct{}, done chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, done = t.last, make(chan struct{})
	t.last = done
	return prev, done
}

// runInTurn runs a batch once the batch claimed before it has handed out
// its events. The batch holds no handler slot while it waits: no claim
// takes one in this mode (see startsFor).
func (r *Runner) runInTurn(items []*held.Item, prev <-chan struct{}, done chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev
	}
	r.runInSegments(items)
}

// runInSegments runs a batch in claim order as runBatch would, a segment
// at a time: each segment is a run of consecutive publish-only events
// (one publish call) or of other events. runBatch alone publishes a
// batch's publish-only events at once, ahead of the handlers of the
// events claimed before them.
func (r *Runner) runInSegments(items []*held.Item) {
	lookup := r.handlerLookup()
	publishOnly := func(it *held.Item) bool { return lookup(it.Event.Type) == nil && r.destination(it.Event) != "" }
	for len(items) > 0 {
		n, first := 1, publishOnly(items[0])
		for n < len(items) && publishOnly(items[n]) == first {
			n++
		}
		r.runBatch(items[:n])
		items = items[n:]
	}
}
