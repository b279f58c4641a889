package held

import (
	"context"
	"testing"
	"time"
)

// Handlers of one batch that start in the same grain share one timeout
// context, whose deadline is never earlier than asked and later by less
// than the grain.
func TestTimeoutContextSharesTimersWithinGrain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	b := &Batch{Ctx: ctx, cancel: cancel}
	defer b.cancel(nil)
	for _, timeout := range []time.Duration{time.Millisecond, 64 * time.Millisecond, time.Minute} {
		grain := timeoutGrain(timeout)
		if grain > 10*time.Millisecond || grain > timeout/64+time.Microsecond {
			t.Fatalf("timeout %v: grain %v too coarse", timeout, grain)
		}
		base := time.Now().Truncate(grain)
		first := b.timeoutContext(base.Add(timeout), timeout)
		again := b.timeoutContext(base.Add(timeout+grain/2), timeout)
		if grain > time.Microsecond && first != again {
			t.Fatalf("timeout %v: starts within one grain got two contexts", timeout)
		}
		for _, at := range []time.Time{base.Add(timeout), base.Add(timeout + grain - 1)} {
			deadline, ok := b.timeoutContext(at, timeout).Deadline()
			if !ok || deadline.Before(at) || deadline.Sub(at) > grain {
				t.Fatalf("timeout %v: asked %v, deadline %v (grain %v)", timeout, at, deadline, grain)
			}
		}
		if next := b.timeoutContext(base.Add(timeout+grain), timeout); next == first {
			t.Fatalf("timeout %v: the next grain reused the context", timeout)
		}
	}
	b.cancel(nil)
	if b.timeout.Err() == nil {
		t.Fatal("cancelling the batch must end its timeout contexts")
	}
}
