package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestZeroClockIsTheWallClock checks that the zero Clock and Real read the
// wall clock.
func TestZeroClockIsTheWallClock(t *testing.T) {
	t.Parallel()
	before := time.Now()
	got := Clock{}.Now()
	require.False(t, got.Before(before))
	require.False(t, Real().Now().Before(got))
}

// TestReplacedNow reads Now, Since and Until from the function given to New.
func TestReplacedNow(t *testing.T) {
	t.Parallel()
	c := New(thousand)
	require.Equal(t, thousand(), c.Now())
	require.Equal(t, 3*time.Second, c.Since(thousand().Add(-3*time.Second)))
	require.Equal(t, 2*time.Second, c.Until(thousand().Add(2*time.Second)))
}

// thousand is a stopped clock, 1,000s after the Unix epoch.
func thousand() time.Time { return time.Unix(1_000, 0) }

// TestSleepEndsWithItsContext returns the context's cause at once, and
// nil after a short wait.
func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	require.ErrorIs(t, Real().Sleep(ctx, time.Hour), cause)
	require.NoError(t, Real().Sleep(context.Background(), time.Millisecond))
}

// TestServe runs once on each signal and again after the wait once
// returned, and returns when quit ends.
func TestServe(t *testing.T) {
	t.Parallel()
	quit, cancel := context.WithCancel(context.Background())
	signal := make(chan struct{}, 1)
	runs := make(chan int, 4)
	n := 0
	returned := make(chan struct{})
	go func() {
		Real().Serve(quit, signal, func() time.Duration {
			n++
			runs <- n
			if n == 1 {
				return time.Millisecond // run again without a signal
			}
			return 0
		})
		close(returned)
	}()
	signal <- struct{}{}
	require.Equal(t, 1, <-runs)
	require.Equal(t, 2, <-runs, "the wait once returned ran it again")
	signal <- struct{}{}
	require.Equal(t, 3, <-runs)
	cancel()
	<-returned
}

// TestReplacedNowLeavesMonoReal keeps Mono, Elapsed and Read's second
// reading on the real time when Now is replaced.
func TestReplacedNowLeavesMonoReal(t *testing.T) {
	t.Parallel()
	c := New(thousand)
	before := time.Now()
	require.False(t, c.Mono().Before(before))
	require.Less(t, c.Elapsed(before), time.Hour)
	now, mono := c.Read()
	require.Equal(t, thousand(), now)
	require.False(t, mono.Before(before))
}

// TestReadOnTheWallClock reads Now and Mono once: the same time.
func TestReadOnTheWallClock(t *testing.T) {
	t.Parallel()
	now, mono := Real().Read()
	require.Equal(t, now, mono)
	require.GreaterOrEqual(t, Real().Elapsed(mono), time.Duration(0))
}

// TestNewAllReplacesMono reads Now, Mono and Elapsed from the function
// given to NewAll.
func TestNewAllReplacesMono(t *testing.T) {
	t.Parallel()
	c := NewAll(thousand)
	require.Equal(t, thousand(), c.Mono())
	require.Equal(t, time.Second, c.Elapsed(thousand().Add(-time.Second)))
	now, mono := c.Read()
	require.Equal(t, thousand(), now)
	require.Equal(t, thousand(), mono)
}
