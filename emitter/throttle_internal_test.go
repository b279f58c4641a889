package emitter

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One call per interval notifies, per database; a notify given back is
// taken by the next call; of concurrent calls exactly one notifies.
func TestNotifyThrottle(t *testing.T) {
	t.Parallel()
	var th notifyThrottle
	const interval = time.Hour
	ok, undo := th.take("a", interval)
	if !ok || undo == nil {
		t.Fatal("the first call must notify")
	}
	if ok, _ := th.take("a", interval); ok {
		t.Fatal("a second call within the interval must not notify")
	}
	if ok, _ := th.take("b", interval); !ok {
		t.Fatal("another database has its own interval")
	}
	undo()
	if ok, _ := th.take("a", interval); !ok {
		t.Fatal("a notify given back must go to the next call")
	}

	var wg sync.WaitGroup
	var notified atomic.Int32
	for range 16 {
		wg.Go(func() {
			if ok, _ := th.take("c", interval); ok {
				notified.Add(1)
			}
		})
	}
	wg.Wait()
	if n := notified.Load(); n != 1 {
		t.Fatalf("%d of 16 concurrent calls notified, want 1", n)
	}
	if ok, _ := th.take("d", time.Nanosecond); !ok {
		t.Fatal("first call")
	}
	time.Sleep(time.Millisecond)
	if ok, _ := th.take("d", time.Nanosecond); !ok {
		t.Fatal("the interval has passed")
	}
}
