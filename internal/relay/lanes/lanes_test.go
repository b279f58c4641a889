package lanes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFlaky = errors.New("broker said try again")

func keyMod(n int64) func(int64) string {
	return func(seq int64) string { return fmt.Sprintf("k%d", seq%n) }
}

// TestOrderUnderTransientFailures publishes many batches with random
// transient failures: every event is acked exactly once, and no key has a
// later event acked before an earlier one, with waves and with a
// key-ordered publisher.
func TestOrderUnderTransientFailures(t *testing.T) {
	t.Parallel()
	for _, keyOrdered := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyOrdered=%v", keyOrdered), func(t *testing.T) {
			t.Parallel()
			f := newFake()
			f.keyOrdered = keyOrdered
			var mu sync.Mutex
			rnd := rand.New(rand.NewPCG(1, 2))
			f.decide = func(outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if rnd.IntN(10) < 3 {
					return errFlaky
				}
				return nil
			}
			l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 4, KeyRetries: 1000, MaxPerCall: 7})
			var seq int64 = 1
			total := 0
			for range 20 {
				// Half keyed over 13 keys, a quarter keyless, a quarter of one hot key.
				evs := events(seq, 150, func(s int64) string {
					switch s % 4 {
					case 0:
						return ""
					case 1:
						return "hot"
					}
					return fmt.Sprintf("k%d", s%13)
				})
				seq += 150
				res, err := l.Publish(t.Context(), evs, nil)
				require.NoError(t, err)
				require.Equal(t, 150, res.Published)
				require.Empty(t, res.Parked)
				total += res.Published
			}
			requireOrdered(t, f)
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Len(t, f.ackCount, total)
			for s, n := range f.ackCount {
				require.Equal(t, 1, n, "seq %d", s)
			}
			for _, size := range f.calls {
				require.LessOrEqual(t, size, 7, "MaxPerCall")
			}
		})
	}
}

// TestPermanentFailureParksKey: a permanent refusal parks the event and
// the later events of its key (not the earlier ones); other keys all
// publish; a keyless event refused is parked alone.
func TestPermanentFailureParksKey(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.decide = func(m outbox.Message) error {
		if s := seqOf(m); s == 13 || s == 20 {
			return outbox.Permanent(errors.New("message too large"))
		}
		return nil
	}
	var reported []*PublishError
	var mu sync.Mutex
	l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 3, OnError: func(err error) {
		var pe *PublishError
		require.ErrorAs(t, err, &pe)
		mu.Lock()
		reported = append(reported, pe)
		mu.Unlock()
	}})
	// Keys k0..k4 by seq % 5; seq 13 is k3; seq 20 is keyless.
	evs := events(1, 40, func(s int64) string {
		if s == 20 {
			return ""
		}
		return fmt.Sprintf("k%d", s%5)
	})
	res, err := l.Publish(t.Context(), evs, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"", "k3"}, res.NewKeys, "the keyless event parks \"\" (replayable), alone")

	var parked []int64
	for _, p := range res.Parked {
		parked = append(parked, p.Event.Seq)
	}
	require.Equal(t, []int64{13, 18, 20, 23, 28, 33, 38}, parked)
	require.Equal(t, batch.Parked{Event: evs[12], Key: "k3", Code: "publish_error", Err: "permanent: message too large"}, res.Parked[0])
	require.Equal(t, string(CodeKeyParked), res.Parked[1].Code)
	require.Contains(t, res.Parked[1].Err, evs[12].Event.ID.String())
	require.Equal(t, batch.Parked{Event: evs[19], Key: "", Code: "publish_error", Err: "permanent: message too large"}, res.Parked[2])
	require.Equal(t, 40-7, res.Published)
	require.Zero(t, res.Retries)
	require.Equal(t, []int64{3, 8}, f.acked["k3"], "the key's earlier events went out")
	for _, p := range res.Parked {
		require.NotContains(t, p.Err, "secret")
	}
	require.Len(t, reported, 2)
	require.True(t, reported[0].Parked)
	requireOrdered(t, f)
}

// TestRetriesSpentParks: an event that keeps failing is retried
// KeyRetries times, then parked with its key; the lane's other keys go
// on meanwhile.
func TestRetriesSpentParks(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.decide = func(m outbox.Message) error {
		if outbox.OrderKey(m.Event) == "k1" {
			return errFlaky
		}
		return nil
	}
	l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 1, KeyRetries: 3})
	evs := events(1, 20, keyMod(4))
	res, err := l.Publish(t.Context(), evs, nil)
	require.NoError(t, err)
	require.Equal(t, 3, res.Retries)
	require.Equal(t, []string{"k1"}, res.NewKeys)
	require.Len(t, res.Parked, 5)
	require.Equal(t, int64(1), res.Parked[0].Event.Seq)
	require.Equal(t, "publish_error", res.Parked[0].Code)
	require.Equal(t, "retries spent after 4 attempts: broker said try again", res.Parked[0].Err)
	require.Equal(t, 15, res.Published)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, 15+4, f.attempted, "four attempts of seq 1, none of its key's later events")
}

// TestOutageSpendsNothing: while every message reports ErrUnavailable the
// circuit opens, nothing is parked or retried, probes carry at most
// ProbeSize events; once the broker is back every event is published.
func TestOutageSpendsNothing(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	probes := make(chan int, 100) // sizes of calls made while down
	f := newFake()
	f.decide = func(outbox.Message) error {
		if up.Load() {
			return nil
		}
		return outbox.Unavailable(errors.New("connection refused"))
	}
	var opened, closed atomic.Int32
	pub := &countingPub{Publisher: f.publisher(), onCall: func(n int) {
		if !up.Load() {
			select {
			case probes <- n:
			default: // the test has read what it needs
			}
		}
	}}
	// KeyRetries 1: an event that an outage call charged twice would be parked.
	l := newLanes(t, Config{Publisher: pub, Lanes: 4, ProbeSize: 2, KeyRetries: 1, OnCircuit: func(ch circuit.Change, cause error) {
		if ch.To == circuit.Open {
			require.ErrorIs(t, cause, outbox.ErrUnavailable)
			opened.Add(1)
		} else {
			closed.Add(1)
		}
	}})
	evs := events(1, 200, keyMod(17))
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = l.Publish(t.Context(), evs, nil)
	}()
	// The first calls (at most one per lane) may be full; then only probes.
	var sizes []int
	for len(sizes) < 4+3 {
		sizes = append(sizes, <-probes)
	}
	state, since := l.Circuit()
	require.NotEqual(t, circuit.Closed, state)
	require.False(t, since.IsZero())
	up.Store(true)
	<-done
	require.NoError(t, err)
	require.Equal(t, 200, res.Published)
	require.Empty(t, res.Parked)
	require.Zero(t, res.Retries)
	full := 0
	for _, n := range sizes {
		if n > 2 {
			full++
		}
	}
	require.LessOrEqual(t, full, 4, "only calls begun before the circuit opened may exceed ProbeSize: %v", sizes)
	require.GreaterOrEqual(t, opened.Load(), int32(3), "opened, then reopened after failed probes")
	require.Equal(t, int32(1), closed.Load())
	state, _ = l.Circuit()
	require.Equal(t, circuit.Closed, state)
	requireOrdered(t, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, n := range f.ackCount {
		require.Equal(t, 1, n, "seq %d", s)
	}
}

// countingPub reports each call's size before passing it on.
type countingPub struct {
	outbox.Publisher
	onCall func(n int)
}

func (c *countingPub) Publish(ctx context.Context, msgs []outbox.Message) []error {
	c.onCall(len(msgs))
	return c.Publisher.Publish(ctx, msgs)
}

// TestParkedKeysNotPublished: the events of a key parked already are
// parked without a call, and the key is not new.
func TestParkedKeysNotPublished(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := newLanes(t, Config{Publisher: f.publisher()})
	evs := events(1, 10, keyMod(2))
	res, err := l.Publish(t.Context(), evs, map[string]bool{"k1": true})
	require.NoError(t, err)
	require.Equal(t, 5, res.Published)
	require.Empty(t, res.NewKeys)
	require.Len(t, res.Parked, 5)
	for _, p := range res.Parked {
		require.Equal(t, "k1", p.Key)
		require.Equal(t, string(CodeKeyParked), p.Code)
	}
	require.Empty(t, f.acked["k1"])
}

// TestSkippedRoute: an event whose route is empty is skipped, not
// published.
func TestSkippedRoute(t *testing.T) {
	t.Parallel()
	f := newFake()
	l := newLanes(t, Config{Publisher: f.publisher(), Route: func(e outbox.Event) string {
		if e.PartitionKey == "k0" {
			return ""
		}
		return "topic." + e.Type
	}})
	res, err := l.Publish(t.Context(), events(1, 10, keyMod(2)), nil)
	require.NoError(t, err)
	require.Equal(t, Result{Published: 5, Skipped: 5}, res)
	require.Empty(t, f.acked["k0"])
}

// TestCancelReturns: a Publish whose ctx ends, in a call or while the
// circuit is open, returns with ctx's error; Close ends one with
// ErrClosed, and later calls at once.
func TestCancelReturns(t *testing.T) {
	t.Parallel()
	t.Run("InCall", func(t *testing.T) {
		t.Parallel()
		called := make(chan struct{}, 16)
		l := newLanes(t, Config{Publisher: blockingPub{called: called}})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := l.Publish(ctx, events(1, 10, keyMod(3)), nil); errc <- err }()
		<-called
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
	})
	t.Run("CircuitOpen", func(t *testing.T) {
		t.Parallel()
		f := newFake()
		f.decide = func(outbox.Message) error { return outbox.Unavailable(errors.New("no responders")) }
		opened := make(chan struct{})
		l := newLanes(t, Config{Publisher: f.publisher(), CircuitMinBackoff: time.Hour, CircuitMaxBackoff: time.Hour,
			OnCircuit: func(circuit.Change, error) { close(opened) }})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := l.Publish(ctx, events(1, 1, keyMod(1)), nil); errc <- err }()
		<-opened
		s, _ := l.Circuit()
		require.Equal(t, circuit.Open, s)
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
	})
	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		called := make(chan struct{}, 16)
		l := newLanes(t, Config{Publisher: blockingPub{called: called}})
		errc := make(chan error, 1)
		go func() { _, err := l.Publish(t.Context(), events(1, 3, keyMod(3)), nil); errc <- err }()
		<-called
		l.Close()
		require.ErrorIs(t, <-errc, ErrClosed)
		_, err := l.Publish(t.Context(), events(1, 3, keyMod(3)), nil)
		require.ErrorIs(t, err, ErrClosed)
		l.Close()
	})
}

// blockingPub blocks every call until its ctx ends, and then reports ctx's
// error for every message.
type blockingPub struct{ called chan struct{} }

func (b blockingPub) Publish(ctx context.Context, msgs []outbox.Message) []error {
	b.called <- struct{}{}
	<-ctx.Done()
	return fill(len(msgs), ctx.Err())
}

// TestKeyOrderedPublisherRuns: a key-ordered publisher gets a key's run in
// one call; after a failure in the run, the key's rest comes back not
// attempted and goes out after the retry, in order. Without it, one event
// per key and call.
func TestKeyOrderedPublisherRuns(t *testing.T) {
	t.Parallel()
	run := func(keyOrdered bool, failSeq int64) (*fakePub, Result) {
		f := newFake()
		f.keyOrdered = keyOrdered
		var failed atomic.Bool
		f.decide = func(m outbox.Message) error {
			if seqOf(m) == failSeq && !failed.Swap(true) {
				return errFlaky
			}
			return nil
		}
		l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 1})
		res, err := l.Publish(t.Context(), events(1, 10, func(int64) string { return "one" }), nil)
		require.NoError(t, err)
		return f, res
	}
	f, res := run(true, 0)
	require.Equal(t, []int{10}, f.callSizes())
	require.Equal(t, 10, res.Published)

	f, res = run(true, 4)
	require.Equal(t, []int{10, 7}, f.callSizes(), "seqs 5-10 not attempted, sent after seq 4's retry")
	require.Equal(t, Result{Published: 10, Retries: 1}, res)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, f.acked["one"])

	f, res = run(false, 4)
	require.Len(t, f.callSizes(), 11)
	require.Equal(t, Result{Published: 10, Retries: 1}, res)
	requireOrdered(t, f)
}

// TestKeylessSpread: keyless events go to lane seq % Lanes, and a lane
// sends its keyless events together.
func TestKeylessSpread(t *testing.T) {
	t.Parallel()
	for seq := int64(0); seq < 64; seq++ {
		require.Equal(t, int(seq%4), laneOf("", seq, 4))
	}
	f := newFake()
	l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 4})
	res, err := l.Publish(t.Context(), events(1, 64, func(int64) string { return "" }), nil)
	require.NoError(t, err)
	require.Equal(t, 64, res.Published)
	require.Equal(t, []int{16, 16, 16, 16}, f.callSizes())
}

// TestCodes: a call cut by PublishTimeout parks with timeout, a panic with
// panic, an invalid event with invalid_event.
func TestCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		pub  outbox.Publisher
		code outbox.Code
	}{
		{"Timeout", timeoutPub{}, outbox.CodeTimeout},
		{"Panic", panicPub{}, outbox.CodePanic},
		{"InvalidEvent", invalidPub{}, outbox.CodeInvalidEvent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newLanes(t, Config{Publisher: c.pub, KeyRetries: 1, PublishTimeout: 5 * time.Millisecond})
			res, err := l.Publish(t.Context(), events(1, 2, keyMod(1)), nil)
			require.NoError(t, err)
			require.Equal(t, 1, res.Retries)
			require.Len(t, res.Parked, 2)
			require.Equal(t, string(c.code), res.Parked[0].Code)
			require.Equal(t, string(CodeKeyParked), res.Parked[1].Code)
		})
	}
}

type timeoutPub struct{}

func (timeoutPub) Publish(ctx context.Context, msgs []outbox.Message) []error {
	<-ctx.Done()
	return fill(len(msgs), ctx.Err())
}

type panicPub struct{}

func (panicPub) Publish(context.Context, []outbox.Message) []error { panic("boom") }

type invalidPub struct{}

func (invalidPub) Publish(_ context.Context, msgs []outbox.Message) []error {
	return fill(len(msgs), &outbox.ValidationError{Field: "Headers", Reason: "bad"})
}

// TestConfig: defaults, and a field out of range named.
func TestConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Publisher", ce.Field)
	_, err = New(Config{Publisher: newFake(), RetryMin: time.Minute, RetryMax: time.Second})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "RetryMax", ce.Field)
	l, err := New(Config{Publisher: newFake()})
	require.NoError(t, err)
	defer l.Close()
	require.Equal(t, 16, l.cfg.Lanes)
	require.Equal(t, 8, l.cfg.KeyRetries)
	require.Equal(t, 500, l.cfg.MaxPerCall)
	require.False(t, l.keyOrdered)
}

// TestOtherKeysGoOnWhileOneRetries: a key waiting for its retry holds
// only itself: its lane's other keys are all published meanwhile (the
// failing key succeeds only once they are, within its retries).
func TestOtherKeysGoOnWhileOneRetries(t *testing.T) {
	t.Parallel()
	f := newFake()
	var others atomic.Int32
	f.decide = func(m outbox.Message) error {
		if outbox.OrderKey(m.Event) != "k0" {
			others.Add(1)
			return nil
		}
		if others.Load() < 40 {
			return errFlaky
		}
		return nil
	}
	l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 1, KeyRetries: 1000, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	res, err := l.Publish(t.Context(), events(1, 50, keyMod(5)), nil)
	require.NoError(t, err)
	require.Equal(t, 50, res.Published)
	require.Positive(t, res.Retries)
	requireOrdered(t, f)
}

// TestUnexplainedNotAttempted: a publisher that reports a key's first
// message of a call not attempted is charged a failure for it, not
// trusted with calls that charge nothing.
func TestUnexplainedNotAttempted(t *testing.T) {
	t.Parallel()
	l := newLanes(t, Config{Publisher: notAttemptingPub{}, KeyRetries: 2})
	res, err := l.Publish(t.Context(), events(1, 3, keyMod(2)), nil)
	require.NoError(t, err)
	require.Equal(t, 4, res.Retries)
	require.Equal(t, []string{"k0", "k1"}, res.NewKeys)
	require.Len(t, res.Parked, 3)
}

type notAttemptingPub struct{}

func (notAttemptingPub) Publish(_ context.Context, msgs []outbox.Message) []error {
	return fill(len(msgs), outbox.ErrNotAttempted)
}

// TestHooksAndParkedAcrossBatches: OnPublish sees every call; a key
// parked by one batch, passed as parked to the next, is parked there
// unpublished while the key's earlier events stay acked once.
func TestHooksAndParkedAcrossBatches(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.decide = func(m outbox.Message) error {
		if seqOf(m) == 3 {
			return outbox.Permanent(errors.New("not authorised"))
		}
		return nil
	}
	var calls, msgs atomic.Int64
	l := newLanes(t, Config{Publisher: f.publisher(), Lanes: 2, OnPublish: func(n int, _ time.Duration) {
		calls.Add(1)
		msgs.Add(int64(n))
	}})
	res, err := l.Publish(t.Context(), events(1, 10, keyMod(3)), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"k0"}, res.NewKeys)
	parked := map[string]bool{}
	for _, k := range res.NewKeys {
		parked[k] = true
	}
	res2, err := l.Publish(t.Context(), events(11, 10, keyMod(3)), parked)
	require.NoError(t, err)
	require.Empty(t, res2.NewKeys)
	for _, p := range res2.Parked {
		require.Equal(t, "k0", p.Key)
	}
	require.Len(t, res2.Parked, 3) // seqs 12, 15, 18
	require.Equal(t, int64(res.Published+res2.Published+1), msgs.Load(), "every message went through OnPublish once")
	require.Positive(t, calls.Load())
	require.Empty(t, f.acked["k0"])
	requireOrdered(t, f)
}
