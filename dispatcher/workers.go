package dispatcher

import "time"

// workerIdle is how long a handler goroutine waits for more work before it
// ends.
const workerIdle = 10 * time.Second

// workers runs handler calls on goroutines that outlive one call. Starting
// a goroutine per event costs its creation and, worse, the copying of its
// stack as the call grows it; a goroutine kept from an earlier call has its
// stack grown already. There is never more than one goroutine per running
// call plus the idle ones, and each holds a handler slot while it runs, so
// there are at most about Concurrency of them. An idle goroutine ends
// after workerIdle or when quit is closed.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to an idle goroutine
	quit  <-chan struct{}
}

func newWorkers(quit <-chan struct{}) *workers {
	return &workers{tasks: make(chan func()), quit: quit}
}

// Go runs f on an idle goroutine, or on a new one when none is idle.
func (w *workers) Go(f func()) {
	select {
	case w.tasks <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // let the finished call's closure be collected while idle
		idle.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}
