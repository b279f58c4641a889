package dispatcher

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestWorkersRunEveryTaskAndEndAtQuit runs more tasks at once than there
// are idle goroutines, then checks that every task ran and that every
// goroutine ended once quit closed.
func TestWorkersRunEveryTaskAndEndAtQuit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	quit := make(chan struct{})
	w := newWorkers(quit)
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

// TestWorkersReuseIdleGoroutines checks that a task given while a goroutine
// is idle runs on it rather than on a new one.
func TestWorkersReuseIdleGoroutines(t *testing.T) {
	quit := make(chan struct{})
	defer close(quit)
	w := newWorkers(quit)
	done := make(chan struct{})
	w.Go(func() { done <- struct{}{} })
	<-done
	before := runtime.NumGoroutine()
	// The goroutine is idle once it waits in its select; until then a
	// task would start a new one, so wait for the count to settle.
	time.Sleep(10 * time.Millisecond)
	for range 100 {
		w.Go(func() { done <- struct{}{} })
		<-done
		time.Sleep(time.Millisecond) // let it return to idle
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "idle goroutines were not reused")
}
