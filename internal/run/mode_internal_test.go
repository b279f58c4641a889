package run

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// NewMode picks per key under PerKey whatever the slots, claim order with
// one slot, unordered otherwise; each answers the claimer as its mode
// says.
func TestModesAnswerTheClaimer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		perKey              bool
		concurrency         int
		claimers, room      int
		skip, ordered, wake bool
	}{
		{"unordered", false, 4, 3, 10 - 2, true, false, false},
		{"claim order", false, 1, 1, 10 - 2, true, false, false},
		{"per key", true, 1, 3, 10, false, true, true},
	} {
		r := testRunner(t, Config{Mode: NewMode(tc.perKey, tc.concurrency), Concurrency: tc.concurrency})
		r.cfg.Claimers, r.cfg.BatchSize = 3, 2
		m := r.mode
		require.Equal(t, tc.claimers, m.Claimers(), tc.name)
		require.Equal(t, tc.room, m.Room(10, 5), tc.name+": suspects beyond a batch take room")
		require.Equal(t, tc.skip, m.SkipSuspects(2), tc.name)
		require.False(t, m.SkipSuspects(1), tc.name)
		require.Equal(t, tc.ordered, m.Ordered(), tc.name)
		require.Equal(t, tc.wake, m.WakeOnRetry(), tc.name)
	}
}
