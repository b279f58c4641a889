package pgoutboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DefaultDispatchTimeout bounds [DispatchUntilIdle] when its ctx has no
// deadline.
const DefaultDispatchTimeout = 10 * time.Second

// idleCheckInterval is the time between two reads of the table while
// DispatchUntilIdle waits for it to become idle.
const idleCheckInterval = 10 * time.Millisecond

// stopGrace is how much longer than the dispatcher's DrainTimeout
// DispatchUntilIdle waits for its Run to return after asking it to stop:
// the time for the outcome writes after the drain's hard stop.
const stopGrace = 10 * time.Second

// defaultDrain is the DrainTimeout DispatchUntilIdle gives the dispatcher
// when the caller's Config leaves it zero (and NoDrain false): short, so
// that the hard stop comes well within stopGrace.
const defaultDrain = time.Second

// DispatchResult is what [DispatchUntilIdle] saw once the dispatcher had
// stopped.
type DispatchResult struct {
	// Counts are the table's rows per status (and the due PENDING rows)
	// after the dispatcher stopped: every status, whoever wrote it.
	Counts admin.Counts
	// Stats are the dispatcher's own counters: what it claimed, sent,
	// retried and failed during this run.
	Stats dispatcher.Stats
}

// DispatchUntilIdle runs a dispatcher on pool with cfg and handlers (event
// type → handler, each registered with Dispatcher.Handle) until the table
// is idle, stops it cleanly and returns the counts. The table is idle once
// the dispatcher has issued its first claim and no row is PROCESSING and
// no PENDING row of a type the dispatcher claims (see
// dispatcher.Dispatcher.ClaimedTypes) is due by the database clock.
// Events scheduled later (a
// Delay, a retry's backoff) stay PENDING and count as idle: a failed
// attempt ends the run with its retry pending (Counts.Pending,
// Stats.Retried). To see the retry run, call DispatchUntilIdle again once
// it is due. While events are due it triggers claims itself, so a long
// PollInterval or disabled wake-ups do not slow the test down.
//
// When cfg leaves DrainTimeout zero (and NoDrain false) the dispatcher
// drains for 1s, not the dispatcher's default 30s, before it cancels the
// handlers' contexts. After asking it to stop, DispatchUntilIdle waits for
// its Run to return, at most DrainTimeout plus 10s.
//
// The test fails, after the dispatcher has stopped, when cfg or a handler
// is refused, when the dispatcher cannot start (a missing table, say),
// when its stop does not end cleanly, or when the table is not idle by
// ctx's deadline ([DefaultDispatchTimeout] when ctx has none); the message
// then lists the rows still due or in flight. When Run has not returned
// within its wait (a handler that ignores its context keeps it running),
// the test fails naming the handlers still running, and that dispatcher
// may still write to the table afterwards.
//
// The test also fails when due events of a type the dispatcher does not
// claim are left PENDING (a typo in a handlers key, or a handler left
// out: the dispatcher leaves such events for another one), or when the
// dispatcher claimed events it could not route (a Publisher whose
// RouteFunc gave them no destination, and no handler: it leaves them
// PENDING for another replica, see dispatcher.Stats.Unroutable); the
// message names the types. Other events
// that end FAILED (a handler's permanent error, the retry budget spent) do
// not fail the test: they are the caller's to check, in Counts or with
// [RequireEmitted].
func DispatchUntilIdle(ctx context.Context, tb TB, pool *pgxpool.Pool, cfg dispatcher.Config, handlers map[string]outbox.Handler) DispatchResult {
	tb.Helper()
	const name = "DispatchUntilIdle"
	if cfg.DrainTimeout == 0 && !cfg.NoDrain {
		cfg.DrainTimeout = defaultDrain
	}
	w := newWatch()
	d, r, err := newDispatcher(pool, cfg, w.wrap(handlers))
	if err != nil {
		fail(tb, name, "%v", err)
		return DispatchResult{}
	}
	a, err := admin.New(pool, admin.Config{Table: cfg.Table})
	if err != nil {
		fail(tb, name, "%v", err)
		return DispatchResult{}
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	run := make(chan error, 1)
	go func() { run <- d.Run(context.WithoutCancel(ctx)) }()

	ran, waitErr := waitIdle(ctx, d, a, run)
	var b strings.Builder
	if waitErr != nil {
		fmt.Fprintf(&b, "%v", waitErr)
		describeBusy(ctx, &b, r, pool, a)
	}
	if !ran {
		if err := stop(d, run, cfg.DrainTimeout, w); err != nil {
			if b.Len() > 0 {
				b.WriteString("\n  ")
			}
			fmt.Fprintf(&b, "the dispatcher did not stop cleanly: %v", err)
		}
	}
	if b.Len() > 0 {
		fail(tb, name, "%s", b.String())
		return DispatchResult{}
	}
	if msg := unroutable(d.Stats(), handlers); msg != "" {
		fail(tb, name, "%s", msg)
		return DispatchResult{}
	}
	if msg := unclaimedDue(context.WithoutCancel(ctx), d, a, handlers); msg != "" {
		fail(tb, name, "%s", msg)
		return DispatchResult{}
	}
	counts, err := a.Counts(context.WithoutCancel(ctx))
	if err != nil {
		fail(tb, name, "%v", err)
		return DispatchResult{}
	}
	return DispatchResult{Counts: counts, Stats: d.Stats()}
}

// newDispatcher builds the dispatcher and the table reader for cfg.
func newDispatcher(pool *pgxpool.Pool, cfg dispatcher.Config, handlers map[string]outbox.Handler) (*dispatcher.Dispatcher, reader, error) {
	r, err := newReader(cfg.Table)
	if err != nil {
		return nil, reader{}, err
	}
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		return nil, reader{}, fmt.Errorf("dispatcher.New: %w", err)
	}
	for _, t := range slices.Sorted(maps.Keys(handlers)) {
		if err := d.Handle(t, handlers[t]); err != nil {
			return nil, reader{}, fmt.Errorf("handler for %q: %w", t, err)
		}
	}
	return d, r, nil
}

// withDefaultTimeout gives ctx DefaultDispatchTimeout when it has no
// deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultDispatchTimeout)
}

// waitIdle reads the table, once the dispatcher has issued its first
// claim, until it is idle, the dispatcher's Run returns (ran is then
// true), or ctx ends. It triggers a claim whenever events are due.
func waitIdle(ctx context.Context, d *dispatcher.Dispatcher, a *admin.Admin, run <-chan error) (ran bool, err error) {
	tick := time.NewTicker(idleCheckInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-run:
			if err == nil {
				err = errors.New("its Run returned nil")
			}
			return true, fmt.Errorf("the dispatcher stopped before %s was idle: %w", a.Table(), err)
		case <-ctx.Done():
			return false, fmt.Errorf("%s not idle when the context ended (%w)", a.Table(), context.Cause(ctx))
		case <-tick.C:
		}
		if d.Stats().ClaimCycles == 0 {
			continue // still starting: Run reports what keeps it from starting
		}
		c, err := a.Counts(ctx)
		if err == nil && c.Processing == 0 && c.Due > 0 {
			c, err = claimedCounts(ctx, d, a)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			return false, err
		case err != nil:
			continue // the deadline passed during the read: the case above reports it
		case c.Processing == 0 && c.Due == 0:
			return false, nil
		case c.Due > 0:
			d.Trigger()
		}
	}
}

// claimedCounts is the table's counts with Due counting only the due
// PENDING rows of the types d claims, all read in one snapshot (a row
// claimed between two reads must not look idle).
func claimedCounts(ctx context.Context, d *dispatcher.Dispatcher, a *admin.Admin) (admin.Counts, error) {
	s, err := a.Summary(ctx)
	if err != nil {
		return admin.Counts{}, err
	}
	types, all := d.ClaimedTypes()
	c := s.Counts
	c.Due = 0
	for _, t := range s.ByType {
		if all || slices.Contains(types, t.Type) {
			c.Due += t.Due
		}
	}
	return c, nil
}

// unclaimedDue describes the due PENDING events of types d does not claim
// (no handler matched them), or returns "" when there are none.
func unclaimedDue(ctx context.Context, d *dispatcher.Dispatcher, a *admin.Admin, handlers map[string]outbox.Handler) string {
	types, all := d.ClaimedTypes()
	if all {
		return ""
	}
	byType, err := a.PendingByType(ctx)
	if err != nil {
		return err.Error()
	}
	var n int64
	var left []string
	for _, p := range byType {
		if p.Due > 0 && !slices.Contains(types, p.Type) {
			n += p.Due
			left = append(left, p.Type)
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s left PENDING: no handler matched their types (%s), so the dispatcher did not claim them; %s; "+
		"check the handlers map for a typo or a missing type", events(int(n)), quotedList(left), registeredHandlers(handlers))
}

// stop asks the dispatcher to stop and waits for its Run to return, at
// most drain plus stopGrace, and returns Run's result. When Run is still
// running after that, it says which handlers keep it running.
func stop(d *dispatcher.Dispatcher, run <-chan error, drain time.Duration, w *watch) error {
	asked, cancel := context.WithCancel(context.Background())
	cancel() // Stop only asks; Run's result arrives on run
	_ = d.Stop(asked)
	wait := drain + stopGrace
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-run:
		return err
	case <-timer.C:
	}
	if types := w.ignoringContext(); len(types) > 0 {
		return fmt.Errorf("a handler ignores its context: the handler for %s was still running %s after the stop "+
			"(its context was cancelled after the %s drain); the dispatcher keeps running until it returns "+
			"and may write to the table after this test", quotedList(types), wait, drain)
	}
	return fmt.Errorf("its Run had not returned %s after the stop; it may write to the table after this test", wait)
}

// describeBusy adds the table's counts and the first rows still due or in
// flight to a failure message.
func describeBusy(ctx context.Context, b *strings.Builder, r reader, db DB, a *admin.Admin) {
	ctx = context.WithoutCancel(ctx)
	c, err := a.Counts(ctx)
	if err != nil {
		return // the failure already names the read that failed
	}
	fmt.Fprintf(b, "\n  %d PENDING (%d due), %d PROCESSING, %d SENT, %d FAILED",
		c.Pending, c.Due, c.Processing, c.Sent, c.Failed)
	rows, err := r.busy(ctx, db, shownRows)
	if err != nil || len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\n  the first %d events due or in flight:", len(rows))
	listRows(b, rows, nil)
}
