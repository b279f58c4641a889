package dispatcher

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lifecycle"
	"github.com/pgoutbox/pgoutbox/internal/run"
	"github.com/pgoutbox/pgoutbox/internal/startcheck"
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
	backlog, unregister := d.observe() // the gauges, while Run runs
	defer unregister()
	defer d.circuit.Stop()

	quit, stopHelpers := context.WithCancel(d.dbCtx)
	startRunner(d, workers.New(quit.Done(), d.clock))
	var helpers sync.WaitGroup
	leases := newKeeper(d.dbCtx, d)
	d.completer = newCompleter(d.dbCtx, d, leases.LeaseWrites())
	helpers.Go(func() { d.completer.Run(quit) })
	helpers.Go(func() { leases.Run(quit) })
	helpers.Go(func() { retain(newRetention(d), d.life, ctx, quit) })
	helpers.Go(func() { backlog.Run(quit) })
	helpers.Go(func() { d.greeter.Run(quit) })
	switch {
	case listener != nil:
		helpers.Go(func() { newListener(d).Run(quit, listener) })
	case d.cfg.Wakeup == WakeupAuto:
		helpers.Go(func() { newListener(d).Run(quit, nil) })
	}
	d.health.begin(d.clock.Mono())

	d.cfg.Logger.Info("pgoutbox: dispatcher started", "table", d.cfg.Table.String(), "owner", d.cfg.Owner,
		"batch_size", d.cfg.BatchSize, "concurrency", d.cfg.Concurrency, "delivery", d.cfg.Delivery.String(),
		"wakeups", d.cfg.Wakeup.String(), "ordering", d.cfg.Ordering.String(), "head_policy", d.cfg.HeadPolicy.String(),
		"order_scope", d.cfg.OrderScope.String())
	started := d.clock.Mono()
	d.claimer.Run(ctx, d.workCtx)
	cause := d.life.StopCause(ctx)
	d.cfg.Logger.Info("pgoutbox: dispatcher stopping", "table", d.cfg.Table.String(), "owner", d.cfg.Owner,
		"cause", cause, "ran_for", d.clock.Elapsed(started).Round(time.Millisecond).String())
	d.life.SetState(lifecycle.StateStopping)
	err := d.drain(hardStop)
	stopHelpers()
	helpers.Wait()
	d.report.FlushAllRepeats()
	d.cfg.Logger.Info("pgoutbox: dispatcher stopped", "table", d.cfg.Table.String(), "owner", d.cfg.Owner, "cause", cause)
	return err
}

// startUp runs the start-up checks (the table, its schema, and in
// WakeupRequired mode the wake-up probe) under a context that ends with
// ctx or when Stop is called, so that a stop is never kept waiting by a
// database that does not answer. A stop or a cancelled ctx during
// start-up gives errInterrupted.
func (d *Dispatcher) startUp(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := d.life.UntilStop(ctx)
	defer cancel()
	err := newStartChecks(d).Run(ctx)
	var listener *pgx.Conn
	if err == nil && d.cfg.Wakeup == WakeupRequired {
		listener, err = newListener(d).Require(ctx)
	}
	if ctx.Err() != nil {
		if listener != nil {
			_ = listener.Close(context.WithoutCancel(ctx))
		}
		return nil, errInterrupted
	}
	return listener, err
}

// startChecks returns the start-up checks of this dispatcher (the table,
// its schema, the order index, the role's privileges, the isolation).
func newStartChecks(d *Dispatcher) *startcheck.Checker {
	return startcheck.New(startcheck.Config{
		Pool: d.pool, Store: d.store, Table: d.cfg.Table, Owner: d.cfg.Owner, Logger: d.cfg.Logger,
		PerKey: d.cfg.Ordering == PerKey, DeleteSent: d.cfg.DeleteSent, KeepSent: d.cfg.KeepSent,
		RetainFailed: d.cfg.RetainFailed, SkipVerify: d.cfg.SkipVerify, PollInterval: d.cfg.PollInterval,
		OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: d.clock.Mono,
		EnsurePartitionsFunc: newRetention(d).EnsureAtStart, UnverifiedFunc: d.health.skipVerify,
	})
}

// drain stops handlers from starting, releases unstarted claims, waits for
// in-flight work up to DrainTimeout, then cancels it and waits for it to
// end.
func (d *Dispatcher) drain(hardStop context.CancelCauseFunc) error {
	timer := d.clock.NewTimer(d.cfg.DrainTimeout)
	defer timer.Stop()
	idle := d.held.Stop()
	// Nothing can start now: the events whose handler never started go
	// back to PENDING.
	d.completer.Release(d.held.Unstarted(), "release at stop failed; the leases will expire and be recovered")
	select {
	case <-idle:
		return nil
	case <-timer.C:
	}
	err := drainTimedOut(d.held)
	d.hardStopped.Store(true)
	hardStop(errHardStop)
	<-idle
	return err
}

// newRunner returns the runner of d's batches (see internal/run), in its
// scheduling mode. It reads the clock's real time (handler run times, slot
// waits), which Config.now does not replace.
func newRunner(d *Dispatcher) *run.Runner {
	cfg := d.cfg
	return run.New(run.Config{
		Mode: d.mode, Held: d.held, Report: d.report, Circuit: d.circuit, Clock: d.clock,
		Logger: cfg.Logger, Table: cfg.Table.String(), Owner: cfg.Owner,
		Publisher: cfg.Publisher, RouteFunc: cfg.RouteFunc, PublishTypes: cfg.PublishTypes, PublishSet: d.publish,
		AtMostOnce: cfg.Delivery == AtMostOnce, HandlerTimeout: cfg.HandlerTimeout, PublishTimeout: cfg.PublishTimeout,
		MaxSnoozes: cfg.MaxSnoozes, SkipFailed: cfg.HeadPolicy == SkipFailed, ByType: cfg.OrderScope == ScopeKeyAndType,
		SuspectWait: cfg.suspectTurnWait(), Concurrency: cfg.Concurrency, Claimers: cfg.Claimers, BatchSize: cfg.BatchSize,
		Release:      func(items []*held.Item, failed string) { d.completer.Release(items, failed) },
		FinalFailure: func(it *held.Item) bool { return d.completer.Final(it) },
	})
}

// startRunner gives the runner its workers and the handlers, fixed now
// (Handle refuses new ones once the dispatcher started).
func startRunner(d *Dispatcher, w *workers.Pool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runner.Start(w, maps.Clone(d.handlers), d.defaultHandler)
}

// opTimeout is how long one of the dispatcher's own database operations
// may take: half the lease, at most 30s.
func opTimeout(lease time.Duration) time.Duration { return min(lease/2, 30*time.Second) }

// signal does a non-blocking send on a coalescing channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
