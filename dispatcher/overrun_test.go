package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// deafHandler blocks, ignoring its context, until release is called; it
// sends its context on started once. Register release as a cleanup after
// the dispatcher's, so that it runs before the stop should the test fail.
func deafHandler() (h outbox.Handler, started chan context.Context, release func()) {
	unblock := make(chan struct{})
	release = sync.OnceFunc(func() { close(unblock) })
	started = make(chan context.Context, 1)
	var once sync.Once
	return func(ctx context.Context, _ outbox.Event) error {
		once.Do(func() { started <- ctx })
		<-unblock // ignores its context
		return nil
	}, started, release
}

// A handler that ignores its context does not hold its event for ever: once
// it runs past HandlerTimeout, replica A stops renewing its lease; the
// lease expires, recovery returns the event, A's claims leave it out while
// the stuck call runs, and replica B delivers it, within three lease
// durations (database clock) of the timeout. (Before: A renewed the stuck
// call's lease for ever, or re-claimed the event and waited behind the
// call while renewing the new claim; B was never called.)
func TestHungHandlerEventDeliveredByAnotherReplica(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	const lease = 2 * time.Second
	cfgA := baseConfig(db)
	cfgA.Owner, cfgA.LeaseDuration, cfgA.HandlerTimeout, cfgA.RecoverEvery = "a", lease, 200*time.Millisecond, 1
	a, err := dispatcher.New(db.NewPool(t, 4), cfgA)
	require.NoError(t, err)
	deaf, started, release := deafHandler()
	require.NoError(t, a.Handle("x", deaf))
	runDispatcher(t, a)
	t.Cleanup(release)
	stuck := <-started
	<-stuck.Done() // the timeout passed: from now on the call overruns
	t0 := dbNow(t, db)

	cfgB := baseConfig(db)
	cfgB.Owner, cfgB.LeaseDuration, cfgB.PollInterval, cfgB.RecoverEvery = "b", lease, 500*time.Millisecond, 1
	b, err := dispatcher.New(db.NewPool(t, 4), cfgB)
	require.NoError(t, err)
	calledB := make(chan struct{}, 10)
	require.NoError(t, b.Handle("x", func(context.Context, outbox.Event) error {
		calledB <- struct{}{}
		return nil
	}))
	runDispatcher(t, b)

	for readRow(t, db, id).Status != outbox.StatusSent {
		if now := dbNow(t, db); now.Sub(t0) > 3*lease {
			t.Fatalf("3 lease durations after the timeout the event is %s under %q (B called %d times)",
				readRow(t, db, id).Status, lockOwner(t, db, id), len(calledB))
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, calledB, 1, "B delivered it")
	require.Equal(t, uint64(1), a.Stats().Claimed, "A never claimed it again behind its stuck call")

	release() // the abandoned call returns: its outcome is fenced out
	waitFor(t, "A's late outcome reported lost", func() bool { return a.Stats().LockLost == 1 })
	require.Equal(t, outbox.StatusSent, readRow(t, db, id).Status)
}

// A handler running past its timeout is logged at WARN with the event's
// id, type and running time, and again a lease duration later; Stats, the
// pgoutbox.events.overrun counter and Health count it, and Health is
// unhealthy while half the handler slots (here one of two) are held by
// such calls.
func TestOverrunIsLoggedCountedAndUnhealthy(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	logs := &logRecorder{}
	mp := &telemetrytest.MeterProvider{}
	cfg := baseConfig(db)
	cfg.Logger, cfg.MeterProvider = slog.New(logs), mp
	cfg.LeaseDuration, cfg.HandlerTimeout, cfg.Concurrency = 1500*time.Millisecond, 50*time.Millisecond, 2
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	deaf, started, release := deafHandler()
	require.NoError(t, d.Handle("x", deaf))
	runDispatcher(t, d)
	t.Cleanup(release)
	<-(<-started).Done()

	waitFor(t, "the overrun's WARN", func() bool { return logs.count(slog.LevelWarn, "event_id", id.String()) == 1 })
	require.Equal(t, 1, logs.count(slog.LevelWarn, "event_type", "x"))
	s := d.Stats()
	require.Equal(t, uint64(1), s.Overruns)
	require.Equal(t, 1, s.Overrunning)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.overrun"), 0)
	require.NoError(t, mp.Collect(context.Background()))
	require.InDelta(t, 1, mp.Sum("pgoutbox.handlers.overrunning"), 0)
	h := d.Health()
	require.Equal(t, 1, h.Overrunning)
	require.Equal(t, 1, h.OverrunLimit)
	require.False(t, h.OverrunningSince.IsZero())
	require.ErrorIs(t, h.Healthy(time.Hour), dispatcher.ErrUnhealthy)
	require.ErrorContains(t, h.Healthy(time.Hour), "past their timeout")

	waitFor(t, "the overrun's second WARN", func() bool { return logs.count(slog.LevelWarn, "event_id", id.String()) == 2 })
	require.Equal(t, uint64(1), d.Stats().Overruns, "one call, counted once")

	release()
	waitFor(t, "the call's end", func() bool { return d.Stats().Overrunning == 0 })
	require.NoError(t, mp.Collect(context.Background()))
	points := mp.Points("pgoutbox.handlers.overrunning")
	require.Zero(t, points[len(points)-1].Value)
	require.NoError(t, d.Health().Healthy(time.Hour))
	require.Equal(t, uint64(1), d.Stats().Overruns)
}

// deafPublisher blocks in Publish, ignoring its context, until unblock
// closes.
type deafPublisher struct{ unblock chan struct{} }

func (p deafPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	<-p.unblock
	return make([]error, len(msgs))
}

// A publish that runs past PublishTimeout, ignoring its context, is an
// overrun like a handler's: logged at WARN naming the call, counted, and
// its event delivered by another replica (here after the publisher
// returns: the stuck call's lease is no longer renewed, so the late
// outcome is fenced out and the event runs again).
func TestPublishOverrunIsLoggedAndNotRenewed(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	logs := &logRecorder{}
	pub := deafPublisher{unblock: make(chan struct{})}
	release := sync.OnceFunc(func() { close(pub.unblock) })
	cfg := baseConfig(db)
	cfg.Logger, cfg.Publisher = slog.New(logs), pub
	cfg.LeaseDuration, cfg.PublishTimeout, cfg.RecoverEvery = 1500*time.Millisecond, 50*time.Millisecond, 1
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	t.Cleanup(release)

	waitFor(t, "the publish overrun's WARN", func() bool { return logs.count(slog.LevelWarn, "call", "publish") == 1 })
	require.Equal(t, 1, logs.count(slog.LevelWarn, "event_id", id.String()))
	require.Equal(t, uint64(1), d.Stats().Overruns)
	require.Equal(t, 1, d.Stats().Overrunning)
	waitFor(t, "the stuck publish's lease expired and recovered", func() bool { return d.Stats().Recovered == 1 })
	require.Equal(t, uint64(1), d.Stats().Claimed, "its claims leave the event out while the publish runs")

	release()
	waitFor(t, "SENT by a later attempt", func() bool { return readRow(t, db, id).Status == outbox.StatusSent })
	require.Equal(t, uint64(1), d.Stats().LockLost, "the late outcome was fenced out")
}

// When the drain times out, Run returns a DrainTimeoutError (matching
// ErrDrainTimeout) naming the events whose calls still ran; a Stop whose
// context ends while a cancelled call still runs (it ignores its context)
// names it too.
func TestDrainTimeoutNamesRunningEvents(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	cfg := baseConfig(db)
	cfg.DrainTimeout = 50 * time.Millisecond
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	deaf, started, release := deafHandler()
	require.NoError(t, d.Handle("x", deaf))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	t.Cleanup(release)
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stopErr := d.Stop(ctx)
	require.ErrorIs(t, stopErr, context.DeadlineExceeded, "the call ignores its context: Stop's ctx ends first")
	require.ErrorContains(t, stopErr, id.String())
	require.ErrorContains(t, stopErr, "(x, running ")

	release()
	runErr := <-errc
	require.ErrorIs(t, runErr, dispatcher.ErrDrainTimeout)
	var drain *dispatcher.DrainTimeoutError
	require.True(t, errors.As(runErr, &drain))
	require.Equal(t, 1, drain.Count)
	require.Len(t, drain.Running, 1)
	require.Equal(t, id, drain.Running[0].ID)
	require.Equal(t, "x", drain.Running[0].Type)
	require.ErrorContains(t, runErr, id.String())
	require.ErrorIs(t, d.Stop(context.Background()), dispatcher.ErrDrainTimeout)
}
