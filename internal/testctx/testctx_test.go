package testctx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// The context ends before the run's deadline, by at most a minute, and
// its cause names the -timeout.
func TestNewEndsBeforeTheRunDeadline(t *testing.T) {
	t.Parallel()
	deadline, ok := t.Deadline()
	if !ok {
		t.Skip("run with -timeout 0: the context has no deadline")
	}
	ctx := testctx.New(t)
	got, ok := ctx.Deadline()
	require.True(t, ok)
	require.True(t, got.Before(deadline))
	require.LessOrEqual(t, deadline.Sub(got), time.Minute)
	require.NoError(t, ctx.Err())
}

// A test given a deadline of a few milliseconds sees the context end with
// ErrRunOutOfTime as its cause.
func TestNewCauseNamesTheTimeout(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(shortTB{T: t, deadline: time.Now().Add(50 * time.Millisecond)})
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	require.True(t, errors.Is(context.Cause(ctx), testctx.ErrRunOutOfTime), "cause %v", context.Cause(ctx))
	require.Contains(t, context.Cause(ctx).Error(), "go test -timeout")
}

// shortTB is a *testing.T whose run ends at deadline.
type shortTB struct {
	*testing.T
	deadline time.Time
}

func (s shortTB) Deadline() (time.Time, bool) { return s.deadline, true }

// Await returns once its condition holds, however long that takes.
func TestAwaitReturnsWhenTheConditionHolds(t *testing.T) {
	t.Parallel()
	n := 0
	testctx.Await(t, "the third check", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
}

// ForCleanup's context outlives t's own, which is done when cleanups run,
// and still ends before the run's deadline.
func TestForCleanupOutlivesTheTest(t *testing.T) {
	t.Parallel()
	deadline, ok := t.Deadline()
	t.Cleanup(func() {
		require.Error(t, t.Context().Err(), "t's context is done in its cleanups")
		ctx, cancel := testctx.ForCleanup(t)
		defer cancel()
		require.NoError(t, ctx.Err())
		got, has := ctx.Deadline()
		require.Equal(t, ok, has)
		if ok {
			require.True(t, got.Before(deadline))
		}
	})
}
