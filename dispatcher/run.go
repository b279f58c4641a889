package dispatcher

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/workers"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
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
	d.workers = workers.New(quit.Done(), clock.New(d.cfg.now))
	var helpers sync.WaitGroup
	d.completer = newCompleter(d.dbCtx, d)
	helpers.Go(func() { d.completer.run(quit.Done()) })
	helpers.Go(func() { newHeartbeat(d.dbCtx, d).run(quit.Done()) })
	helpers.Go(func() { d.markLoop(quit.Done()) })
	helpers.Go(func() { d.retain(ctx, quit) })
	helpers.Go(func() { backlog.run(quit) })
	helpers.Go(func() { d.helloLoop(quit) })
	switch {
	case listener != nil:
		helpers.Go(func() { d.listenLoop(quit, listener) })
	case d.cfg.Wakeup == WakeupAuto:
		helpers.Go(func() { d.autoWakeups(quit) })
	}
	d.health.begin(time.Now())

	d.cfg.Logger.Info("pgoutbox: dispatcher started", "table", d.cfg.Table.String(), "owner", d.cfg.Owner,
		"batch_size", d.cfg.BatchSize, "concurrency", d.cfg.Concurrency, "delivery", d.cfg.Delivery.String(),
		"wakeups", d.cfg.Wakeup.String(), "ordering", d.cfg.Ordering.String(), "head_policy", d.cfg.HeadPolicy.String(),
		"order_scope", d.cfg.OrderScope.String())
	started := time.Now()
	d.coordinate(ctx)
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
	err := d.checkTableRetrying(ctx)
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

// startRetryFor bounds how long the start-up checks try again after the
// connection was lost (a server restarting, a backend terminated); other
// errors are not tried again.
const startRetryFor = 10 * time.Second

// checkTableRetrying runs checkTable, and again after a connection lost
// under it, waiting 50ms doubling up to PollInterval between tries, for at
// most startRetryFor: a database that restarts, or a pooler that drops a
// server connection, as the dispatcher starts must not fail the start
// (a replica restarted during an outage would otherwise exit again).
func (d *Dispatcher) checkTableRetrying(ctx context.Context) error {
	deadline := time.Now().Add(startRetryFor)
	wait := 50 * time.Millisecond
	lost := false // a connection was lost: the server may be restarting
	for {
		err := d.checkTable(ctx)
		lost = lost || err != nil && connectionLost(err)
		if err == nil || !connectionLost(err) && !(lost && notMade(err)) {
			return err
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		d.cfg.Logger.Warn("pgoutbox: start-up check lost its connection; trying again",
			"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, max(d.cfg.PollInterval, 50*time.Millisecond))
	}
}

// connectionLost reports whether err says that an established connection
// to the server was lost: a connection exception (class 08), the server
// shutting down or terminating the backend (57P01, 57P02), the
// connection breaking under a statement, or nothing sent on it. A
// connection that could not be made (a wrong password, a refused port)
// is not tried again, unless the server said it is starting up (57P03)
// or reset the connection while it was being made (a server shutting
// down): a start must report a bad configuration at once. The checks read,
// and the order index's build (PerKey only) is idempotent, so trying them
// again is safe.
func connectionLost(err error) bool {
	code := pgerr.Code(err)
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return code == "57P03" || code == "" && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF))
	}
	var netErr net.Error
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" ||
		pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF)
}

// notMade reports whether err is a connection that could not be made with
// no word from the server (refused, unreachable): after a lost connection
// that is a server restarting, and the start tries again; a wrong
// password or a missing database has a code and is never tried again.
func notMade(err error) bool {
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) && pgerr.Code(err) == ""
}

// checkTable fails fast when the outbox table or its schema is missing,
// when the schema does not match what this version needs (Verify, unless
// SkipVerify), when the table lacks a column this version uses (a
// migration not yet run), when Ordering PerKey finds no valid order index
// (checkOrderIndex), or when the role lacks a privilege the
// configuration needs or its transactions do not start at READ COMMITTED
// (checkAccess), rather than logging the same claim error every poll.
func (d *Dispatcher) checkTable(ctx context.Context) error {
	names, err := sqlname.For(d.cfg.Table)
	if err != nil {
		return err
	}
	var exists bool
	err = d.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", names.Qualified).Scan(&exists)
	if err != nil {
		return errtext.Wrap(err, "dispatcher: check table")
	}
	if !exists {
		return errtext.WrapHint(outbox.ErrMissingTable, "is it the Table given to migrations.Migrate?",
			"dispatcher: %s", d.store.Table())
	}
	err = d.verify(ctx)
	timedOut := ranOutOfTime(err) && ctx.Err() == nil
	if err != nil && !timedOut {
		return err
	}
	// The column check ran out of time only under a statement_timeout
	// shorter than a catalog read: it is skipped then (statement timeouts
	// must never stop progress), and a missing column shows in the
	// claims' errors instead.
	if err := d.store.CheckColumns(ctx, d.pool); err != nil && !(ranOutOfTime(err) && ctx.Err() == nil) {
		return err
	}
	if err := d.checkOrderIndex(ctx, names); err != nil {
		return err
	}
	if err := d.checkAccess(ctx); err != nil {
		return err
	}
	d.ensurePartitionsAtStart(ctx, names)
	if timedOut { // once more, with a fresh timeout
		return d.verifyAgain(ctx)
	}
	return nil
}

// verifyAgain runs the schema check a second time after the first ran out
// of time. When this one runs out of time too it logs a warning that says
// how to fix it, notes it in Health, and lets the start go on: statement
// timeouts must never stop progress.
func (d *Dispatcher) verifyAgain(ctx context.Context) error {
	err := d.verify(ctx)
	if !ranOutOfTime(err) || ctx.Err() != nil {
		return err
	}
	d.health.skipVerify()
	d.cfg.Logger.Warn("pgoutbox: could not verify the outbox schema in time; starting without that check",
		"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "error", err,
		"fix", "raise statement_timeout for the dispatcher's role, or set Config.SkipVerify")
	return nil
}

// verify compares the table's schema with what this version needs
// (migrations.Verify), bounded like the dispatcher's own statements. A
// schema version newer than this library knows is no reason to refuse: a
// later release migrated the table (a rolling upgrade). Then only an
// object this version relies on that is missing refuses the start; the
// definitions that differ are logged at INFO. Nor is a check that ran out
// of time (a statement_timeout, a lock held on the table): statement
// timeouts must never stop progress, so checkTable checks the columns the
// dispatcher uses, tries once more, and then goes on without it (see
// verifyAgain).
func (d *Dispatcher) verify(parent context.Context) error {
	if d.cfg.SkipVerify {
		return nil
	}
	ctx, cancel := d.opContextFrom(parent)
	defer cancel()
	err := migrations.Verify(ctx, d.pool, migrations.Config{Table: d.cfg.Table})
	var mismatch *migrations.VerifyError
	switch {
	case errors.As(err, &mismatch) && mismatch.NewerCompatible():
		d.cfg.Logger.Info("pgoutbox: the outbox schema is newer than this version of pgoutbox; dispatching on it",
			"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "schema", mismatch.Problems[len(mismatch.Problems)-1].Actual,
			"differences", newerDifferences(mismatch))
		return nil
	case mismatch != nil:
		return errtext.WrapHint(err, "Config.SkipVerify starts without this check", "")
	case pgerr.Code(err) == pgerr.InsufficientPrivilege:
		return errtext.WrapHint(err, "the dispatcher's role needs SELECT on the version table, as "+
			"migrations.RenderGrants grants, or set Config.SkipVerify", "")
	}
	return err
}

// newerDifferences lists the definitions of a newer schema that differ
// from what this version expects (all problems but the version's, last).
func newerDifferences(e *migrations.VerifyError) []string {
	diffs := make([]string, 0, len(e.Problems)-1)
	for _, p := range e.Problems[:len(e.Problems)-1] {
		diffs = append(diffs, p.String())
	}
	return diffs
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
