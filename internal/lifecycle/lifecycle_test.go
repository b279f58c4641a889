package lifecycle

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var errRunning, errStopped, errCheck = errors.New("running"), errors.New("stopped"), errors.New("check")

func TestLife(t *testing.T) {
	t.Parallel()
	l := New(errRunning, errStopped)
	require.NoError(t, l.Begin())
	require.ErrorIs(t, l.Begin(), errRunning)
	require.ErrorIs(t, l.Started(errCheck), errCheck, "a failed check goes back to new")
	state, _ := l.Snapshot()
	require.Equal(t, StateNew, state)
	require.True(t, l.IfNew(func() {}))

	require.NoError(t, l.Begin())
	require.NoError(t, l.Started(nil))
	require.False(t, l.IfNew(func() { t.Fatal("not new") }))
	require.ErrorIs(t, l.Begin(), errRunning)
	l.SetState(StateStopping)
	require.ErrorIs(t, l.Begin(), errStopped)
	l.Stop()
	require.Equal(t, "Stop was called", l.StopCause(context.Background()))
	require.ErrorIs(t, l.Ended(errCheck), errCheck)
	<-l.Done()
	require.ErrorIs(t, l.Err(), errCheck)
	require.ErrorIs(t, l.Begin(), errStopped)
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	l := New(errRunning, errStopped)
	l.Stop()
	<-l.Done()
	<-l.StopCh()
	require.ErrorIs(t, l.Begin(), ErrInterrupted, "as a stop during the checks")
	require.NoError(t, l.Err())
}

func TestStopDuringChecks(t *testing.T) {
	t.Parallel()
	l := New(errRunning, errStopped)
	require.NoError(t, l.Begin())
	ctx, cancel := l.UntilStop(context.Background())
	defer cancel()
	l.Stop()
	<-ctx.Done()
	require.True(t, l.StoppedStarting(context.Background()))
	require.ErrorIs(t, l.Started(errCheck), ErrInterrupted, "the stop was taken")
	state, _ := l.Snapshot()
	require.Equal(t, StateStopped, state)
}

func TestStopCauseNamesTheContext(t *testing.T) {
	t.Parallel()
	l := New(errRunning, errStopped)
	ctx, cancel := context.WithCancelCause(context.Background())
	require.Equal(t, "unknown", l.StopCause(ctx))
	cancel(errCheck)
	require.Equal(t, "the context given to Start or Run ended: check", l.StopCause(ctx))
}
