package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// Start returns once relaying began; Stop drains the reader, stops the
// services in reverse order of their start, and may be called again.
func TestStartStopTwice(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	r := newRelay(t, validConfig(t, fs))
	require.Equal(t, StateNew, r.Health().State)
	require.NoError(t, r.Start(testctx.New(t)))
	require.Equal(t, StateRunning, r.Health().State)
	require.False(t, r.Health().Started.IsZero())
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })

	require.NoError(t, stop(t, r))
	require.NoError(t, stop(t, r), "a second Stop returns the same result")
	require.Equal(t, StateStopped, r.Health().State)
	require.Equal(t, []string{"stop reader", "stop ticker", "close"}, fs.log()[2:], "reader drained first, then the ticker")
	require.ErrorIs(t, r.Start(testctx.New(t)), ErrStopped)
	require.ErrorIs(t, r.Run(testctx.New(t)), ErrStopped)
	<-r.Done()
	require.NoError(t, r.Err())
}

// A Stop before Start stops the relay: Start returns ErrStopped, Run nil,
// and no check or service runs.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	r := newRelay(t, validConfig(t, fs))
	require.NoError(t, stop(t, r))
	require.ErrorIs(t, r.Start(testctx.New(t)), ErrStopped)
	require.NoError(t, r.Run(testctx.New(t)))
	require.Empty(t, fs.log())
	require.Zero(t, fs.verified)
	require.Equal(t, StateStopped, r.Health().State)
}

// A second Start while running returns ErrRunning.
func TestStartWhileRunning(t *testing.T) {
	t.Parallel()
	r := newRelay(t, validConfig(t, newFakes()))
	require.NoError(t, r.Start(testctx.New(t)))
	require.ErrorIs(t, r.Start(testctx.New(t)), ErrRunning)
	require.ErrorIs(t, r.Run(testctx.New(t)), ErrRunning)
	require.NoError(t, stop(t, r))
}

// A service that ends with an error ends Run with that error, after the
// other services were stopped; a *StopError shows in Health.
func TestRunReturnsAServiceError(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	r := newRelay(t, validConfig(t, fs))
	errc := make(chan error, 1)
	go func() { errc <- r.Run(testctx.New(t)) }()
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })
	stopErr := &StopError{Group: "g1", Reason: "snapshot went backwards", Err: ErrSnapshotBackwards}
	fs.readerFail <- stopErr

	err := <-errc
	require.ErrorIs(t, err, ErrSnapshotBackwards)
	var se *StopError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "g1", se.Group)
	require.Equal(t, []string{"fail reader", "stop ticker", "close"}, fs.log()[2:])
	h := r.Health()
	require.Equal(t, StateStopped, h.State)
	require.Equal(t, "g1", h.StoppedGroup)
	require.Equal(t, "snapshot went backwards", h.StopReason)
	require.ErrorIs(t, h.Err, ErrSnapshotBackwards)
	require.ErrorIs(t, h.Healthy(time.Minute), ErrUnhealthy)
	require.Contains(t, h.Degraded, `group "g1" stopped: snapshot went backwards`)
	require.ErrorIs(t, stop(t, r), ErrSnapshotBackwards, "Stop returns the result of relaying")
}

// A service that returns nil on its own ends relaying with an error
// naming it.
func TestRunReturnsWhenAServiceEnds(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	r := newRelay(t, validConfig(t, fs))
	require.NoError(t, r.Start(testctx.New(t)))
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })
	fs.readerFail <- nil
	<-r.Done()
	require.ErrorContains(t, r.Err(), "reader ended")
}

// Start reports a failed check and leaves the relay new: it may be
// started again. SkipVerify skips the schema check only.
func TestStartChecks(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.verifyErr = errBoom
	r := newRelay(t, validConfig(t, fs))
	require.ErrorIs(t, r.Start(testctx.New(t)), errBoom)
	require.Equal(t, StateNew, r.Health().State)
	require.Empty(t, fs.log(), "no service started")

	fs.mu.Lock()
	fs.verifyErr, fs.checkErr = nil, ErrNoGroup
	fs.mu.Unlock()
	require.ErrorIs(t, r.Run(testctx.New(t)), ErrNoGroup)
	require.Equal(t, StateNew, r.Health().State)

	fs.mu.Lock()
	fs.checkErr = nil
	fs.mu.Unlock()
	require.NoError(t, r.Start(testctx.New(t)))
	require.NoError(t, stop(t, r))
	require.Equal(t, 3, fs.verified)

	fs2 := newFakes()
	fs2.verifyErr = errBoom
	cfg := validConfig(t, fs2)
	cfg.SkipVerify = true
	r2 := newRelay(t, cfg)
	require.NoError(t, r2.Start(testctx.New(t)))
	require.Zero(t, fs2.verified)
	require.NoError(t, stop(t, r2))
}

// A context ended before Start makes Start return its error and stops
// the relay.
func TestStartWithEndedContext(t *testing.T) {
	t.Parallel()
	r := newRelay(t, validConfig(t, newFakes()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, r.Start(ctx), context.Canceled)
	require.Equal(t, StateStopped, r.Health().State)
}

// The end of Start's context stops the relay as Stop does: the reader
// drains.
func TestContextEndStops(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	r := newRelay(t, validConfig(t, fs))
	ctx, cancel := context.WithCancel(testctx.New(t))
	require.NoError(t, r.Start(ctx))
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })
	cancel()
	<-r.Done()
	require.NoError(t, r.Err())
	require.Equal(t, []string{"stop reader", "stop ticker", "close"}, fs.log()[2:])
}

// A Stop whose ctx ends while the reader drains cancels the batch in
// flight: Stop returns ctx's error, and relaying ends with
// ErrDrainTimeout.
func TestStopContextCutsTheDrain(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.drainHold = make(chan struct{}) // never closed: the batch never finishes
	r := newRelay(t, validConfig(t, fs))
	require.NoError(t, r.Start(testctx.New(t)))
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })

	ctx, cancel := context.WithCancel(testctx.New(t))
	errc := make(chan error, 1)
	go func() { errc <- r.Stop(ctx) }()
	<-fs.drained
	require.Equal(t, StateStopping, r.Health().State)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	<-r.Done()
	require.ErrorIs(t, r.Err(), ErrDrainTimeout)
	require.Equal(t, []string{"cancel reader", "stop ticker", "close"}, fs.log()[2:])
}

// DrainTimeout cuts a drain no Stop bounds.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.drainHold = make(chan struct{})
	cfg := validConfig(t, fs)
	cfg.DrainTimeout = time.Millisecond // the batch never finishes
	r := newRelay(t, cfg)
	ctx, cancel := context.WithCancel(testctx.New(t))
	require.NoError(t, r.Start(ctx))
	testctx.Await(t, "both services started", func() bool { return len(fs.log()) == 2 })
	cancel()
	<-r.Done()
	require.True(t, errors.Is(r.Err(), ErrDrainTimeout), "%v", r.Err())
}
