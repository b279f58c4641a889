package stmtsize

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
)

// timeoutShare runs claims against a model of a table under a
// statement_timeout: a backlog that never drains (every claim that fits
// comes back full), where a claim of more rows than fits(i) runs out of
// time. It returns the share of claims that timed out.
func timeoutShare(batchSize, claims int, fits func(i int) int) float64 {
	s := New(batchSize)
	timedOut := 0
	for i := range claims {
		limit := s.size
		if limit > fits(i) {
			timedOut++
			s.RanOutOfTime(limit)
			continue
		}
		s.Full(limit)
	}
	return float64(timedOut) / float64(claims)
}

// After a claim ran out of time, claims grow back slowly enough that few
// of them run out of time again: with statement_timeout 100ms and
// BatchSize 10,000, doubling after every full claim made 32–47% of
// claims time out (here: 50% with a steady 7,000 rows fitting).
func TestClaimSizeGrowsBackSlowlyAfterATimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fits func(i int) int
	}{
		{"steady 7000", func(int) int { return 7000 }},
		{"steady 2500", func(int) int { return 2500 }},
		{"steady 9990", func(int) int { return 9990 }},
		{"load swings", func() func(int) int {
			r := rand.New(rand.NewPCG(1, 2))
			level := 6000
			return func(i int) int {
				if i%50 == 0 { // the load changes every 50 claims
					level = 3000 + r.IntN(7000)
				}
				return level
			}
		}()},
	} {
		share := timeoutShare(10_000, 10_000, tc.fits)
		t.Logf("%s: %.2f%% of claims timed out", tc.name, 100*share)
		require.Less(t, share, 0.05, tc.name)
	}
	// Without a timeout, claims double back at once (a full claim of a
	// limit the room allowed says twice that may fit).
	s := New(10_000)
	s.RanOutOfTime(10_000)
	s.Full(5_000)
	require.Less(t, s.size, 10_000, "no doubling right after a timeout")
	s = New(10_000)
	s.Full(100)
	require.Equal(t, 10_000, s.size, "never timed out: no limit below BatchSize")
}

// TestTimedOut checks that a statement the server cancelled (57014) counts
// as timed out, and other errors do not.
func TestTimedOut(t *testing.T) {
	t.Parallel()
	require.True(t, TimedOut(fmt.Errorf("claim: %w", &pgconn.PgError{Code: pgerr.QueryCanceled})))
	require.False(t, TimedOut(&pgconn.PgError{Code: "40001"}))
	require.False(t, TimedOut(errors.New("connection reset")))
}
