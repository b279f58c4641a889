package lanes

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// fakePub is a publisher that records what it acked, per key in order,
// and each call's size. decide, when set, gives a message's error (nil:
// acked). With keyOrdered it keeps the outbox.KeyOrderedPublisher
// promise: after a key's failure, its later messages of the call are not
// attempted.
type fakePub struct {
	keyOrdered bool
	decide     func(m outbox.Message) error

	mu        sync.Mutex
	acked     map[string][]int64 // key (or "" for keyless) -> seqs acked, in ack order
	ackCount  map[int64]int      // seq -> acks
	calls     []int              // sizes
	twice     bool               // a non-key-ordered call carried a key twice
	attempted int
}

type keyOrderedPub struct{ *fakePub }

func (k keyOrderedPub) PublishesKeysInOrder() bool { return true }

func newFake() *fakePub {
	return &fakePub{acked: map[string][]int64{}, ackCount: map[int64]int{}}
}

// publisher returns f as the lanes' publisher (a KeyOrderedPublisher with
// keyOrdered).
func (f *fakePub) publisher() outbox.Publisher {
	if f.keyOrdered {
		return keyOrderedPub{f}
	}
	return f
}

func (f *fakePub) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	failed := map[string]bool{}
	seen := map[string]bool{}
	var decided []error
	for _, m := range msgs { // decide outside the lock: a decide may block
		if f.decide != nil {
			decided = append(decided, f.decide(m))
		} else {
			decided = append(decided, nil)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, len(msgs))
	for i, m := range msgs {
		key := outbox.OrderKey(m.Event)
		if key != "" && seen[key] && !f.keyOrdered {
			f.twice = true
		}
		seen[key] = true
		if key != "" && failed[key] {
			errs[i] = fmt.Errorf("after a failure: %w", outbox.ErrNotAttempted)
			continue
		}
		f.attempted++
		errs[i] = decided[i]
		if errs[i] != nil {
			failed[key] = key != ""
			continue
		}
		seq := seqOf(m)
		f.acked[key] = append(f.acked[key], seq)
		f.ackCount[seq]++
	}
	return errs
}

func (f *fakePub) callSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.calls...)
}

// seqOf reads the seq the test put in the event's type suffix header.
func seqOf(m outbox.Message) int64 {
	var seq int64
	_, _ = fmt.Sscan(m.Event.Headers["seq"], &seq)
	return seq
}

// events makes n events from seq first on; keyOf gives each its key
// ("" for none).
func events(first int64, n int, keyOf func(seq int64) string) []batch.Event {
	evs := make([]batch.Event, n)
	for i := range evs {
		seq := first + int64(i)
		evs[i] = batch.Event{Seq: seq, Xid: 1, Event: outbox.Event{ID: uuid.New(), Type: "t",
			PartitionKey: keyOf(seq), Headers: map[string]string{"seq": fmt.Sprint(seq)}, Payload: []byte("secret payload")}}
	}
	return evs
}

// newLanes returns lanes on cfg with fast retries and circuit, closed at
// the test's end.
func newLanes(t *testing.T, cfg Config) *Lanes {
	t.Helper()
	cfg.RetryMin = cmpOr(cfg.RetryMin, 50*time.Microsecond)
	cfg.RetryMax = cmpOr(cfg.RetryMax, time.Millisecond)
	cfg.CircuitMinBackoff = cmpOr(cfg.CircuitMinBackoff, time.Millisecond)
	cfg.CircuitMaxBackoff = cmpOr(cfg.CircuitMaxBackoff, 4*time.Millisecond)
	l, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// requireOrdered checks that each key's acks are in seq order without
// going back: a later event of a key is never acked before an earlier
// one.
func requireOrdered(t *testing.T, f *fakePub) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, seqs := range f.acked {
		if key == "" {
			continue
		}
		for i := 1; i < len(seqs); i++ {
			require.Less(t, seqs[i-1], seqs[i], "key %s acked out of order: %v", key, seqs)
		}
	}
	require.False(t, f.twice, "a call carried a key twice")
}
