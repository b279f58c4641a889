package loglimit

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRepeatsHeldBackAndSummarised lets a line through once per Interval,
// counts the repeats in between, and hands them to a summary once the line
// has not come for a whole Interval.
func TestRepeatsHeldBackAndSummarised(t *testing.T) {
	t.Parallel()
	var l Limiter
	at := time.Unix(1_000, 0)
	held := Held{Level: slog.LevelWarn, Msg: "m", Args: []any{"k", "v"}}
	n, ok := l.Allow("a", at, held)
	require.True(t, ok)
	require.Zero(t, n)
	for range 3 {
		_, ok = l.Allow("a", at.Add(time.Second), held)
		require.False(t, ok)
	}
	require.Empty(t, l.Due(at.Add(Interval), false), "the last repeat is less than an interval old")
	due := l.Due(at.Add(time.Second+Interval), false)
	require.Equal(t, []Held{{Level: slog.LevelWarn, Msg: "m", Args: []any{"k", "v"}, Suppressed: 3}}, due)
	require.Empty(t, l.Due(at.Add(time.Hour), true), "summarised once")

	_, ok = l.Allow("a", at.Add(2*time.Second), held)
	require.False(t, ok)
	n, ok = l.Allow("a", at.Add(Interval), held)
	require.True(t, ok, "an interval after it was logged")
	require.Equal(t, 1, n)
}
