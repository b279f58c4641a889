package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// begunItem is e held by a set of its own and begun now, as a handler
// call sees it (suspect: recovered before).
func begunItem(t testing.TB, e *outbox.Event, suspect bool) *held.Item {
	t.Helper()
	s := held.NewSet(clock.Real(), time.Minute)
	items, _ := s.Add(context.Background(), lease.Batch{Token: uuid.New(), Events: []outbox.Event{*e},
		Started: []bool{true}, Suspect: []bool{suspect}}, time.Now(), 0)
	require.True(t, s.Begin(items[0], 0))
	return items[0]
}

// TestSuspectsWaitALeaseForTheTurn: without the test hook, a suspect waits
// LeaseDuration for the suspect turn (TestStuckSuspectHoldsUpNoOtherEvent
// shortens it under a longer lease).
func TestSuspectsWaitALeaseForTheTurn(t *testing.T) {
	t.Parallel()
	cfg := Config{LeaseDuration: 7 * time.Second}
	require.Equal(t, 7*time.Second, cfg.suspectTurnWait())
	SetSuspectWait(&cfg, time.Second)
	require.Equal(t, time.Second, cfg.suspectTurnWait())
}
