package circuit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
)

// TestOpenProbeAndClose walks the circuit through an outage, a failed
// probe (twice the backoff), a successful one, on a clock the test moves.
func TestOpenProbeAndClose(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000, 0)
	var states []State
	c := New(Config{MinBackoff: time.Hour, MaxBackoff: 3 * time.Hour, ProbeSize: 5, WakeFunc: func() {},
		OnChangeFunc: func(s State) { states = append(states, s) }, Clock: clock.NewAll(func() time.Time { return now })})
	defer c.Stop()
	types := Types{Claim: []string{"a", "b"}, Published: []string{"a"}, HandlerOnly: []string{"b"}}

	p, ok := c.Plan(types, 100)
	require.True(t, ok)
	require.Equal(t, Plan{Types: []string{"a", "b"}, Limit: 100}, p)

	ch, ok := c.Outage()
	require.True(t, ok)
	require.Equal(t, Change{To: Open, From: Closed, Backoff: time.Hour, Since: now}, ch)
	_, ok = c.Outage()
	require.False(t, ok, "open already")
	require.True(t, c.IsOpen())
	p, ok = c.Plan(types, 100)
	require.True(t, ok)
	require.Equal(t, Plan{Types: []string{"b"}, Limit: 100}, p, "handler-only types while open")
	due, ok := c.DueTypes(types)
	require.True(t, ok)
	require.Equal(t, []string{"b"}, due)
	_, ok = c.Plan(Types{}, 100)
	require.False(t, ok, "a catch-all claims nothing while open")

	now = now.Add(time.Hour)
	p, ok = c.Plan(types, 100)
	require.True(t, ok)
	require.Equal(t, Plan{Types: []string{"a"}, Limit: 5, Probe: 1}, p, "one probe")
	p, _ = c.Plan(types, 100)
	require.Zero(t, p.Probe, "only one probe at a time")
	c.ProbeEnded(1, false)
	p, _ = c.Plan(types, 100)
	require.Equal(t, uint64(2), p.Probe, "another probe once the first ended")

	ch, ok = c.Outage()
	require.True(t, ok)
	require.Equal(t, Change{To: Open, From: Probing, Backoff: 2 * time.Hour, Since: now.Add(-time.Hour)}, ch)

	now = now.Add(2 * time.Hour)
	_, _ = c.Plan(types, 100)
	ch, ok = c.Reachable()
	require.True(t, ok)
	require.Equal(t, Change{To: Closed, From: Probing, Since: now.Add(-3 * time.Hour)}, ch)
	state, since := c.Snapshot()
	require.Equal(t, Closed, state)
	require.True(t, since.IsZero())
	require.Equal(t, []State{Open, Probing, Open, Probing, Closed}, states)
}
