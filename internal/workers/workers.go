package workers

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/clock"
)

// Idle is how long a handler goroutine waits for more work before it
// ends.
const Idle = 10 * time.Second

// Pool runs handler calls on goroutines that outlive one call. Starting
// a goroutine per event costs its creation and, worse, the copying of its
// stack as the call grows it; a goroutine kept from an earlier call has its
// stack grown already. There is never more than one goroutine per running
// call plus the idle ones, and each holds a handler slot while it runs, so
// there are at most about Concurrency of them. An idle goroutine ends
// after Idle or when quit is closed.
type Pool struct {
	tasks chan func() // unbuffered: a send succeeds only to an idle goroutine
	quit  <-chan struct{}
	clock clock.Clock // times the idle wait
}

// New returns a Pool whose goroutines end when quit is closed.
func New(quit <-chan struct{}, clk clock.Clock) *Pool {
	return &Pool{tasks: make(chan func()), quit: quit, clock: clk}
}

// Go runs f on an idle goroutine, or on a new one when none is idle.
func (w *Pool) Go(f func()) {
	select {
	case w.tasks <- f:
	default:
		go w.loop(f)
	}
}

func (w *Pool) loop(f func()) {
	idle := w.clock.NewTimer(Idle)
	defer idle.Stop()
	for {
		f()
		f = nil // let the finished call's closure be collected while idle
		idle.Reset(Idle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}
