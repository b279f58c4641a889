package dispatcher

import (
	"cmp"
	"context"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/run"
	"github.com/pgoutbox/pgoutbox/internal/startcheck"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
	"github.com/pgoutbox/pgoutbox/internal/workers"
)

// run dispatches: start the helpers, coordinate until told to stop, then
// drain. listener is the wake-up connection the start-up checks opened
// (WakeupRequired), or nil.
func (d *Dispatcher) run(ctx context.Context, listener *pgx.Conn) error {
	// Handlers and database work outlive ctx during the drain: both keep
	// ctx's values but not its cancellation, and only handlers are
	// cancelled at the hard stop.
	d.dbCtx = context.WithoutCancel(ctx)
	workCtx, hardStop := context.WithCancelCause(d.dbCtx)
	d.workCtx = workCtx
	defer hardStop(nil)
	backlog, unregister := d.observeBacklog() // the backlog gauges, while Run runs
	defer unregister()
	defer d.observeCircuit()()       // the circuit gauge, while Run runs
	defer d.observeOverruns()()      // the overrun gauge, while Run runs
	defer d.observeModeConflicts()() // the mode-conflict gauge, while Run runs
	defer d.circuit.Stop()

	quit, stopHelpers := context.WithCancel(d.dbCtx)
	d.startRunner(workers.New(quit.Done(), clock.New(d.cfg.now)))
	var helpers sync.WaitGroup
	d.completer = newCompleter(d.dbCtx, d)
	helpers.Go(func() { d.completer.run(quit.Done()) })
	helpers.Go(func() { newHeartbeat(d.dbCtx, d).run(quit.Done()) })
	helpers.Go(func() { d.markLoop(quit.Done()) })
	helpers.Go(func() { d.retain(ctx, quit) })
	helpers.Go(func() { backlog.Run(quit) })
	helpers.Go(func() { d.helloLoop(quit) })
	switch {
	case listener != nil:
		helpers.Go(func() { d.wakeups().Run(quit, listener) })
	case d.cfg.Wakeup == WakeupAuto:
		helpers.Go(func() { d.wakeups().Run(quit, nil) })
	}
	d.health.begin(time.Now())

	d.cfg.Logger.Info("pgoutbox: dispatcher started", "table", d.cfg.Table.String(), "owner", d.cfg.Owner,
		"batch_size", d.cfg.BatchSize, "concurrency", d.cfg.Concurrency, "delivery", d.cfg.Delivery.String(),
		"wakeups", d.cfg.Wakeup.String(), "ordering", d.cfg.Ordering.String(), "head_policy", d.cfg.HeadPolicy.String(),
		"order_scope", d.cfg.OrderScope.String())
	started := time.Now()
	d.claimer.Run(ctx, d.workCtx)
	cause := d.stopCause(ctx)
	d.cfg.Logger.Info("pgoutbox: dispatcher stopping", "table", d.cfg.Table.String(), "owner", d.cfg.Owner,
		"cause", cause, "ran_for", time.Since(started).Round(time.Millisecond).String())
	d.setState(StateStopping)
	err := d.drain(hardStop)
	stopHelpers()
	helpers.Wait()
	d.report.FlushAllRepeats()
	d.cfg.Logger.Info("pgoutbox: dispatcher stopped", "table", d.cfg.Table.String(), "owner", d.cfg.Owner, "cause", cause)
	return err
}

// stopCause says why dispatching ended, for the stop logs: Stop was
// called, or the context given to Start or Run ended (with its cause, so
// that a short-lived context passed by mistake shows in the log).
func (d *Dispatcher) stopCause(ctx context.Context) string {
	if d.stopRequested() {
		return "Stop was called"
	}
	if err := context.Cause(ctx); err != nil {
		return "the context given to Start or Run ended: " + err.Error()
	}
	return "unknown"
}

// startUp runs the start-up checks (the table, its schema, and in
// WakeupRequired mode the wake-up probe) under a context that ends with
// ctx or when Stop is called, so that a stop is never kept waiting by a
// database that does not answer. A stop or a cancelled ctx during
// start-up gives errInterrupted.
func (d *Dispatcher) startUp(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := d.untilStop(ctx)
	defer cancel()
	err := d.startChecks().Run(ctx)
	var listener *pgx.Conn
	if err == nil {
		listener, err = d.requireWakeups(ctx)
	}
	if ctx.Err() != nil {
		if listener != nil {
			_ = listener.Close(context.WithoutCancel(ctx))
		}
		return nil, errInterrupted
	}
	return listener, err
}

// untilStop returns a context that ends with ctx or when Stop is called;
// call cancel when done with it.
func (d *Dispatcher) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-d.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// stoppedStarting reports whether the dispatcher was asked to stop (ctx ended or Stop
// was called) before it started dispatching.
func (d *Dispatcher) stoppedStarting(ctx context.Context) bool {
	return ctx.Err() != nil || d.stopRequested()
}

// startChecks returns the start-up checks of this dispatcher (the table,
// its schema, the order index, the role's privileges, the isolation).
func (d *Dispatcher) startChecks() *startcheck.Checker {
	return startcheck.New(startcheck.Config{
		Pool: d.pool, Store: d.store, Table: d.cfg.Table, Owner: d.cfg.Owner, Logger: d.cfg.Logger,
		PerKey: d.cfg.Ordering == PerKey, DeleteSent: d.cfg.DeleteSent, KeepSent: d.cfg.KeepSent,
		RetainFailed: d.cfg.RetainFailed, SkipVerify: d.cfg.SkipVerify, PollInterval: d.cfg.PollInterval,
		OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: time.Now,
		EnsurePartitionsFunc: d.retention().EnsureAtStart, UnverifiedFunc: d.health.skipVerify,
	})
}

// drain stops handlers from starting, releases unstarted claims, waits for
// in-flight work up to DrainTimeout, then cancels it and waits for it to
// end.
func (d *Dispatcher) drain(hardStop context.CancelCauseFunc) error {
	timer := time.NewTimer(d.cfg.DrainTimeout)
	defer timer.Stop()
	idle := d.held.Stop()
	d.releaseUnstarted()
	select {
	case <-idle:
		return nil
	case <-timer.C:
	}
	err := d.drainTimedOut()
	d.hardStopped.Store(true)
	hardStop(errHardStop)
	<-idle
	return err
}

// releaseUnstarted returns the held events whose handler never started to
// PENDING. Called once the dispatcher is stopping, so none can start now.
func (d *Dispatcher) releaseUnstarted() {
	d.releaseItems(d.held.Unstarted(), "release at stop failed; the leases will expire and be recovered")
}

// newRunner returns the runner of the dispatcher's batches (see
// internal/run), in its scheduling mode. Its clock is the wall clock, as
// it always was (Config.now replaces only the lease deadlines' clock).
func (d *Dispatcher) newRunner() *run.Runner {
	cfg := d.cfg
	return run.New(run.Config{
		Mode: d.mode, Held: d.held, Report: d.report, Circuit: d.circuit, Clock: clock.Real(),
		Logger: cfg.Logger, Table: cfg.Table.String(), Owner: cfg.Owner,
		Publisher: cfg.Publisher, RouteFunc: cfg.RouteFunc, PublishTypes: cfg.PublishTypes, PublishSet: d.publish,
		AtMostOnce: cfg.Delivery == AtMostOnce, HandlerTimeout: cfg.HandlerTimeout, PublishTimeout: cfg.PublishTimeout,
		MaxSnoozes: cfg.MaxSnoozes, SkipFailed: cfg.HeadPolicy == SkipFailed, ByType: cfg.OrderScope == ScopeKeyAndType,
		SuspectWait: cmp.Or(cfg.suspectWait, cfg.LeaseDuration), Concurrency: cfg.Concurrency, Claimers: cfg.Claimers, BatchSize: cfg.BatchSize,
		Release:      d.releaseItems,
		FinalFailure: func(it *held.Item) bool { return d.completer.failure(it).Final },
	})
}

// startRunner gives the runner its workers and the handlers, fixed now
// (Handle refuses new ones once the dispatcher started).
func (d *Dispatcher) startRunner(w *workers.Pool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runner.Start(w, maps.Clone(d.handlers), d.defaultHandler)
}

// releaseItems returns held items that never started to PENDING,
// uncharged. When the release fails it reports failed and lets them go
// all the same: their leases expire and recovery returns them.
func (d *Dispatcher) releaseItems(items []*held.Item, failed string) {
	ctx, cancel := d.opContext()
	defer cancel()
	if err := d.completer.release(ctx, items); err != nil {
		d.report.Error(failed, err)
		d.held.Remove(items)
	}
}

// opContext bounds one database operation of the dispatcher's own.
func (d *Dispatcher) opContext() (context.Context, context.CancelFunc) {
	return d.opContextFrom(d.dbCtx)
}

// opContextFrom bounds one database operation under parent.
func (d *Dispatcher) opContextFrom(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, opTimeout(d.cfg.LeaseDuration))
}

// opTimeout is how long one of the dispatcher's own database operations
// may take: half the lease, at most 30s.
func opTimeout(lease time.Duration) time.Duration { return min(lease/2, 30*time.Second) }

// serveLoop is the loop of a background writer (the completer, the
// marker): until quit, it runs once on each signal, and again when the
// wait once returned (0: none) has passed.
func serveLoop(quit, signal <-chan struct{}, once func() (wait time.Duration)) {
	retry := stoppedTimer()
	defer retry.Stop()
	for {
		select {
		case <-quit:
			return
		case <-signal:
		case <-retry.C:
		}
		if wait := once(); wait > 0 {
			retry.Reset(wait)
		}
	}
}

// ranOutOfTime reports whether a statement failed for lack of time (see
// stmtsize.RanOutOfTime); the completer's splits ask it.
func ranOutOfTime(err error) bool { return stmtsize.RanOutOfTime(err) }

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// signal does a non-blocking send on a coalescing channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
