package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// Health and Stats report what the services told the recorder, the lag
// the sampler read, the leases and the circuit; Degraded names each
// reason to look.
func TestHealthAndStats(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.sample = sample{LagEvents: 7, LagSeconds: 1.5, TickAge: time.Minute, KeysParked: 2}
	var hooked []error
	cfg := validConfig(t, fs)
	cfg.sampleEvery = time.Millisecond
	cfg.OnError = func(err error) { hooked = append(hooked, err) }
	r := newRelay(t, cfg)

	h := r.Health()
	require.Equal(t, StateNew, h.State)
	require.False(t, h.TickerHeld, "no lease before running")
	require.ErrorIs(t, h.Healthy(time.Minute), ErrUnhealthy)
	require.Empty(t, h.Degraded)

	require.NoError(t, r.Start(testctx.New(t)))
	testctx.Await(t, "a lag sample", func() bool { return !r.Health().SampledAt.IsZero() })
	fs.rec.OnTick(41)
	fs.rec.OnTick(42)
	fs.rec.OnBatch(batchReport{From: 1, To: 3, Events: 10, Published: 8, Parked: 2, NewKeys: 1, Retries: 3, Duration: time.Millisecond})
	fs.rec.OnBatch(batchReport{From: 3, To: 4, Events: 5, Err: errBoom})
	fs.rec.OnHeadroom(LowHeadroomXids - 1)
	fs.mu.Lock()
	fs.circuit, fs.openSince = circuit.Open, time.Now()
	fs.mu.Unlock()

	h = r.Health()
	require.Equal(t, StateRunning, h.State)
	require.NoError(t, h.Healthy(time.Minute), "degraded is healthy")
	require.True(t, h.TickerHeld)
	require.True(t, h.GroupHeld)
	require.False(t, h.LastBatch.IsZero())
	require.False(t, h.LastTick.IsZero())
	require.Equal(t, int64(7), h.LagEvents)
	require.InDelta(t, 1.5, h.LagSeconds, 0)
	require.Equal(t, time.Minute, h.TickAge)
	require.Equal(t, int64(2), h.KeysParked)
	require.Equal(t, CircuitOpen, h.Circuit)
	require.True(t, h.HeadroomKnown)
	require.Len(t, h.Degraded, 3, "%q", h.Degraded)
	require.Contains(t, h.Degraded[0], "no tick for 1m0s with 7 events waiting")
	require.Contains(t, h.Degraded[1], "circuit open")
	require.Contains(t, h.Degraded[2], "head-room")

	require.Equal(t, Stats{Published: 8, Parked: 2, KeysParked: 1, Batches: 1, Retries: 3, Ticks: 2, Errors: 1}, r.Stats())
	require.Len(t, hooked, 1)
	require.True(t, errors.Is(hooked[0], errBoom))
	require.NoError(t, stop(t, r))
	require.Equal(t, StateStopped, r.Health().State)
	require.False(t, r.Health().GroupHeld, "no lease once stopped")
}

// No event waiting, a recent tick, a closed circuit and head-room
// enough: nothing degraded.
func TestHealthNotDegraded(t *testing.T) {
	t.Parallel()
	h := Health{State: StateRunning, SampledAt: time.Now(), LagEvents: 0, TickAge: time.Hour,
		HeadroomKnown: true, HeadroomXids: LowHeadroomXids}
	require.Empty(t, degraded(h, 10*time.Millisecond), "an old tick with nothing waiting is idle, not late")
	h.LagEvents, h.TickAge = 5, 100*time.Millisecond
	require.Empty(t, degraded(h, 10*time.Millisecond), "10×TickInterval is the limit")
	h.TickAge++
	require.Len(t, degraded(h, 10*time.Millisecond), 1)
}

func TestStrings(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"new", "starting", "running", "stopping", "stopped"},
		[]string{StateNew.String(), StateStarting.String(), StateRunning.String(), StateStopping.String(), StateStopped.String()})
	require.Equal(t, []string{"closed", "open", "probing"},
		[]string{CircuitClosed.String(), CircuitOpen.String(), CircuitProbing.String()})
	require.Equal(t, []string{"latest", "oldest"}, []string{Latest.String(), Oldest.String()})
	err := &StopError{Group: "g", Reason: "snapshot went backwards", Err: ErrSnapshotBackwards}
	require.Equal(t, `pgoutbox: relay: group "g" stopped: snapshot went backwards: `+ErrSnapshotBackwards.Error(), err.Error())
	require.ErrorIs(t, err, ErrSnapshotBackwards)
}

// Lag samples that keep failing make the relay unhealthy past maxAge; one
// that succeeds ends the run of failures.
func TestHealthySamplesFailing(t *testing.T) {
	t.Parallel()
	fs := newFakes()
	fs.sampleErr = errBoom
	cfg := validConfig(t, fs)
	cfg.sampleEvery = time.Millisecond
	r := newRelay(t, cfg)
	require.NoError(t, r.Start(testctx.New(t)))
	testctx.Await(t, "two failed samples", func() bool { return r.Health().SampleErrors >= 2 })
	h := r.Health()
	require.False(t, h.FailingSince.IsZero())
	require.NoError(t, h.Healthy(time.Hour), "not for longer than maxAge")
	require.ErrorIs(t, h.Healthy(0), ErrUnhealthy)
	require.ErrorContains(t, h.Healthy(0), "database reads failing since")
	require.GreaterOrEqual(t, r.Stats().Errors, uint64(2))

	fs.mu.Lock()
	fs.sampleErr = nil
	fs.mu.Unlock()
	testctx.Await(t, "a sample that succeeds", func() bool { return r.Health().SampleErrors == 0 })
	require.True(t, r.Health().FailingSince.IsZero())
	require.NoError(t, r.Health().Healthy(0))
	require.NoError(t, stop(t, r))
}
