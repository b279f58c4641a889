package workers

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pgoutbox/pgoutbox/internal/clock"
)

// TestWorkersRunEveryTaskAndEndAtQuit runs more tasks at once than there
// are idle goroutines, then checks that every task ran and that every
// goroutine ended once quit closed.
func TestWorkersRunEveryTaskAndEndAtQuit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	quit := make(chan struct{})
	w := New(quit, clock.Real())
	var ran atomic.Int64
	var wg sync.WaitGroup
	for round := range 3 {
		for range 50 * (round + 1) {
			wg.Add(1)
			w.Go(func() { defer wg.Done(); ran.Add(1) })
		}
		wg.Wait()
	}
	require.Equal(t, int64(300), ran.Load())
	close(quit)
}

// TestWorkersReuseIdleGoroutines checks that tasks given one after the
// other, each once the previous one's goroutine is idle again, run on the
// same goroutine rather than on a new one each.
func TestWorkersReuseIdleGoroutines(t *testing.T) {
	quit := make(chan struct{})
	defer close(quit)
	w := New(quit, clock.Real())
	ran := make(chan string)
	seen := map[string]bool{}
	for range 100 {
		w.Go(func() { ran <- goroutineID() })
		seen[<-ran] = true
		time.Sleep(time.Millisecond) // let its goroutine return to idle
	}
	// A task given just before its goroutine got back to idle starts a
	// new one; a hundred tasks on new goroutines would be a hundred ids.
	require.LessOrEqual(t, len(seen), 3, "idle goroutines were not reused")
}

// goroutineID returns the id of the calling goroutine, as its stack trace
// names it.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
