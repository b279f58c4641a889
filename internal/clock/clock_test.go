package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReplacedNow(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_000, 0)
	c := New(func() time.Time { return at })
	require.Equal(t, at, c.Now())
	require.Equal(t, 3*time.Second, c.Since(at.Add(-3*time.Second)))
	require.Equal(t, 2*time.Second, c.Until(at.Add(2*time.Second)))
}

func TestZeroClockIsTheWallClock(t *testing.T) {
	t.Parallel()
	before := time.Now()
	got := Clock{}.Now()
	require.False(t, got.Before(before))
	require.False(t, Real().Now().Before(got))
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	require.ErrorIs(t, Real().Sleep(ctx, time.Hour), cause)
	require.NoError(t, Real().Sleep(context.Background(), time.Millisecond))
}
