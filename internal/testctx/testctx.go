// Package testctx gives tests a context bounded by the run's own time
// budget, `go test -timeout`, instead of a fixed wall-clock cap: a cap
// that passes on an idle machine fails a loaded one (issue 24: TestInstall
// hit its own 5-minute cap at load 13–34, where alone it took 80 s).
//
// The context ends a little before the run's deadline, leaving time for
// the test to report what it was waiting for and for its cleanups, and
// its cause says so: a subprocess it kills, or a wait it ends, is then
// explained by context.Cause rather than by a bare "signal: killed". The
// Makefile gives go test a generous -timeout (see docs/testing.md), so a
// test that waits for progress is ended by its own failure, never by the
// clock of a slow machine.
package testctx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// maxGrace is the most of the remaining budget kept back for reporting
// and cleanups.
const maxGrace = time.Minute

// New returns a context that ends when t ends or shortly before the run's
// -timeout, whichever comes first, with a cause naming the timeout. With
// no -timeout (-timeout 0) it ends with t only.
func New(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := bound(t, t.Context())
	t.Cleanup(cancel)
	return ctx
}

// ForCleanup returns a context that ends only shortly before the run's
// -timeout (like New), not when t ends: t's own context is already done
// when its cleanups run, so a cleanup that stops something and waits for
// it to finish takes this one instead of a fixed cap. The caller cancels
// it.
func ForCleanup(t testing.TB) (context.Context, context.CancelFunc) {
	t.Helper()
	return bound(t, context.Background())
}

// bound returns parent ended shortly before the run's -timeout, if it
// has one.
func bound(t testing.TB, parent context.Context) (context.Context, context.CancelFunc) {
	type deadliner interface{ Deadline() (time.Time, bool) }
	d, ok := t.(deadliner)
	if !ok {
		return context.WithCancel(parent)
	}
	deadline, ok := d.Deadline()
	if !ok {
		return context.WithCancel(parent)
	}
	grace := min(maxGrace, time.Until(deadline)/10)
	cause := fmt.Errorf("%w: the go test -timeout of this run ends at %s (%s from now); %s kept back to report and clean up",
		ErrRunOutOfTime, deadline.Format(time.TimeOnly), time.Until(deadline).Round(time.Second), grace.Round(time.Second))
	return context.WithDeadlineCause(parent, deadline.Add(-grace), cause)
}

// ErrRunOutOfTime is the cause (context.Cause) of a context from New that
// ended because the run's -timeout was near.
var ErrRunOutOfTime = errors.New("testctx: the test run is out of time")

// pollEvery is how often Await checks its condition.
const pollEvery = 5 * time.Millisecond

// Await checks cond every few milliseconds until it holds, and fails t,
// naming what it waited for and why it stopped, if the run's budget (New)
// ends first. It replaces require.Eventually with a fixed bound, which a
// loaded machine can pass before the condition could hold.
func Await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := New(t)
	start := time.Now()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("still waiting for %s after %s: %v", what, time.Since(start).Round(time.Millisecond), context.Cause(ctx))
		case <-time.After(pollEvery):
		}
	}
}
