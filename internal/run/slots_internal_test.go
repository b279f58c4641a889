package run

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/workers"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A dispatcher whose only handler is DefaultHandler counts as quick only
// by its handlers' durations: it once counted as having no handlers (and
// so as quick) whatever they took, and its claims marked every event
// started, charging a crash's recovery to events that never ran.
func TestDefaultHandlerIsTimedLikeOthers(t *testing.T) {
	t.Parallel()
	d := testRunner(t, Config{Concurrency: 10})
	quit := make(chan struct{})
	defer close(quit)
	d.Start(workers.New(quit, clock.Real()), map[string]outbox.Handler{}, func(context.Context, outbox.Event) error { return nil })
	d.noteHandlerTime(2 * time.Second)
	require.False(t, d.handlersQuick(), "2s handlers count as quick")
	require.False(t, d.handlersTiny())
	starts, slots := d.mode.StartsFor(10)
	require.Equal(t, starts, slots, "behind slow handlers a claim marks only events it has a handler slot for")
	d.mode.ReleaseSlots(slots)
}
