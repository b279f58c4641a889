package tally

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// TestUnroutableCountsAndBoundsTypes adds counts, warns of a type once per
// WarnEvery, and keeps at most MaxTypes types.
func TestUnroutableCountsAndBoundsTypes(t *testing.T) {
	t.Parallel()
	var u Unroutable
	require.Nil(t, u.Counts())
	at := time.Unix(1_000, 0)
	require.Equal(t, []string{"a"}, u.Add(map[string]int64{"a": 2}, at))
	require.Empty(t, u.Add(map[string]int64{"a": 1}, at.Add(time.Minute)))
	require.Equal(t, map[string]uint64{"a": 3}, u.Counts())
	many := map[string]int64{}
	for i := range MaxTypes + 10 {
		many[time.Duration(i).String()] = 1
	}
	u.Add(many, at.Add(2*time.Minute))
	require.Len(t, u.Counts(), MaxTypes)
}

// TestWaitingWarnsOncePerInterval keeps the latest counts, warns of a type
// once per WarnEvery, and forgets a type that stopped waiting.
func TestWaitingWarnsOncePerInterval(t *testing.T) {
	t.Parallel()
	var w Waiting
	at := time.Unix(1_000, 0)
	counts := []lease.TypeCount{{Type: "a", Count: 3}, {Type: "b", Count: 4}}
	require.Equal(t, counts, w.Update(counts, at))
	require.Empty(t, w.Update(counts, at.Add(time.Minute)))
	byType, total := w.Counts()
	require.Equal(t, map[string]int64{"a": 3, "b": 4}, byType)
	require.Equal(t, int64(7), total)
	require.Empty(t, w.Update(counts[:1], at.Add(2*time.Minute)), "b no longer waits")
	require.Equal(t, counts[1:], w.Update(counts[1:], at.Add(3*time.Minute)), "b waits again: warned at once")
	require.Equal(t, counts[:1], w.Update(counts[:1], at.Add(WarnEvery)), "a interval later")
	w.Update(nil, at.Add(time.Hour))
	byType, total = w.Counts()
	require.Nil(t, byType)
	require.Zero(t, total)
}
