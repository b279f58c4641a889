package run

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A key's chain stops at the first event a stop took for release
// (held.Set.Unstarted): that event never ran, so it has no outcome, and
// the events behind it must not go on to be marked started, wave after
// wave, while the stop releases them (a release that fails leaves them to
// lease expiry, and recovery would charge them a start that never ran).
// No database: the test is the marker, and counts the starts it is asked
// to mark.
func TestOrderedChainStopsAtTheStopsRelease(t *testing.T) {
	t.Parallel()
	r := testRunner(t, Config{Mode: NewMode(true, 1), Publisher: &recPublisher{},
		RouteFunc: func(outbox.Event) string { return "topic" }}) // publish-only: no workers needed
	events := make([]outbox.Event, 3)
	for i := range events {
		events[i] = outbox.Event{ID: uuid.New(), Type: "x"}
	}
	token := uuid.New()
	items, _ := r.held.Add(context.Background(), lease.Batch{Token: token, Events: events,
		Started: make([]bool, 3), Keys: []string{"k", "k", "k"}}, time.Now(), 0)
	r.held.Stop()
	require.Equal(t, items, r.held.Unstarted(), "the stop takes the three for release")

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.runOrdered(items)
	}()
	var marked []uuid.UUID
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-r.held.MarksWanted():
			taken := r.held.TakeMarks()
			refs := make([]lease.Ref, len(taken))
			for i, it := range taken {
				refs[i] = it.Ref()
			}
			for _, it := range taken {
				marked = append(marked, it.Event.ID)
			}
			r.held.Marked(taken, lease.RefResult{Done: refs})
		}
	}
	require.Equal(t, []uuid.UUID{events[0].ID}, marked, "only the first wave is marked: the chain stops there")
	_, ok := r.held.Outcome(items[0])
	require.False(t, ok, "an event the stop released never ran: it has no outcome")
	r.held.Remove(items) // the stop's release
	require.Zero(t, r.held.Len())
}
