package claim

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
)

// fakeScheduler answers the claimer's questions with fixed values.
type fakeScheduler struct{ claimers int }

func (s fakeScheduler) Claimers() int                         { return s.claimers }
func (s fakeScheduler) Room(h, _ int) int                     { return h }
func (s fakeScheduler) SkipSuspects(int) bool                 { return false }
func (s fakeScheduler) Ordered() bool                         { return false }
func (s fakeScheduler) StartsFor(int) (int, int)              { return 0, 0 }
func (s fakeScheduler) ReleaseSlots(int)                      {}
func (s fakeScheduler) Dispatch([]*held.Item) context.Context { return context.Background() }
func (s fakeScheduler) WakeOnRetry() bool                     { return false }

// TestClaimedTypes: a DefaultHandler, or a Publisher without
// PublishTypes, claims every type; otherwise the handled types and, with
// a Publisher, the published ones, sorted.
func TestClaimedTypes(t *testing.T) {
	t.Parallel()
	publish := PublishSet([]string{"p", "b"})
	for _, tc := range []struct {
		name  string
		p     TypesParams
		types []string
		all   bool
	}{
		{"default handler", TypesParams{DefaultHandler: true, Handled: slices.Values([]string{"h"})}, nil, true},
		{"handlers only", TypesParams{Publish: publish, Handled: slices.Values([]string{"h", "a"})}, []string{"a", "h"}, false},
		{"none", TypesParams{Handled: slices.Values([]string(nil))}, []string{}, false},
		{"publisher with types", TypesParams{Publisher: true, Publish: publish, Handled: slices.Values([]string{"h"})}, []string{"b", "h", "p"}, false},
		{"publisher without types", TypesParams{Publisher: true, Handled: slices.Values([]string{"h"})}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			types, all := ClaimedTypes(tc.p)
			require.Equal(t, tc.all, all)
			require.Equal(t, tc.types, types)
		})
	}
	require.Nil(t, PublishSet(nil))
}

// TestCircuitTypes: a probe claims the published types it claims, and the
// handler-only types never need the publisher; a catch-all claims every
// type and has neither list.
func TestCircuitTypes(t *testing.T) {
	t.Parallel()
	k := kinds{publish: PublishSet([]string{"p"}), types: []string{"h", "p"}}
	c := k.circuitTypes()
	require.Equal(t, []string{"h", "p"}, c.Claim)
	require.Equal(t, []string{"p"}, c.Published)
	require.Equal(t, []string{"h"}, c.HandlerOnly)

	all := kinds{all: true}
	c = all.circuitTypes()
	require.Nil(t, c.Claim)
	require.Nil(t, c.Published)
	require.Nil(t, c.HandlerOnly)
}

// TestClaimLimit: a claim takes up to BatchSize within the room left by
// the claims in flight, and none while less than half a batch is left.
func TestClaimLimit(t *testing.T) {
	t.Parallel()
	c := New(Config{Held: held.NewSet(clock.Real(), time.Minute), Scheduler: fakeScheduler{claimers: 2},
		BatchSize: 10, Concurrency: 5, Claimers: 2})
	require.Equal(t, 10, c.claimLimit(0))  // room 25
	require.Equal(t, 10, c.claimLimit(10)) // room 15
	require.Equal(t, 5, c.claimLimit(20))  // room 5: half a batch
	require.Equal(t, 0, c.claimLimit(21))  // room 4: less than half a batch
}

// TestPollStretchesWhileIdle: while wake-ups work and nothing was claimed,
// polls stretch up to IdlePollInterval; a claim brings them back.
func TestPollStretchesWhileIdle(t *testing.T) {
	t.Parallel()
	c := New(Config{PollInterval: time.Second, IdlePollInterval: 3 * time.Second, RecoverEvery: 10, Clock: clock.Real()})
	p := c.newPoller()
	defer p.stop()
	p.next(true, 0)
	require.Equal(t, 2*time.Second, p.interval)
	p.next(true, 0)
	require.Equal(t, 3*time.Second, p.interval)
	p.next(false, 0)
	require.Equal(t, time.Second, p.interval)
	p.next(true, 0)
	p.unstretch()
	require.Equal(t, time.Second, p.interval)
}

// TestRecoverDue: every RecoverEvery-th poll recovers, and so does one
// after RecoverEvery plain intervals (by the wall clock), or after a pass
// that left expired leases behind.
func TestRecoverDue(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000, 0)
	c := New(Config{PollInterval: time.Second, RecoverEvery: 3, Clock: clock.NewAll(func() time.Time { return now })})
	p := c.newPoller()
	defer p.stop()
	require.False(t, p.recoverDue(1))
	require.True(t, p.recoverDue(3))
	now = now.Add(3 * time.Second)
	require.True(t, p.recoverDue(4))
	require.False(t, p.recoverDue(5))
	p.recoverBacklog = true
	require.True(t, p.recoverDue(5))
}

// TestRunReturnsWhenStopped: a claimer stopped before its first claim
// returns at once, having fixed its claimed types.
func TestRunReturnsWhenStopped(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	close(stop)
	c := New(Config{
		Held: held.NewSet(clock.Real(), time.Minute), Scheduler: fakeScheduler{claimers: 1}, Clock: clock.Real(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BatchSize: 1, Claimers: 1, PollInterval: time.Hour, RecoverEvery: 1,
		ClaimedTypesFunc: func() ([]string, bool) { return []string{"a"}, false },
		Stop:             stop,
	})
	c.Run(context.Background(), context.Background())
	require.Equal(t, []string{"a"}, c.kinds.types)
}
