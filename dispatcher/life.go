package dispatcher

import "github.com/pgoutbox/pgoutbox/internal/lifecycle"

// life is where a dispatcher is in its life (State) and how it ended:
// new, starting, running, stopping, stopped, once (internal/lifecycle,
// which the relay shares). Start and Run move it (Begin, then Started;
// Ended once dispatching returns), Stop asks for the stop (Stop) and
// waits for Done, Health and Err read it.
//
// Its lock is a leaf: nothing is called under it except the function
// Handle gives IfNew, which takes no lock. Handle holds Dispatcher.mu
// while it takes this lock (Dispatcher.mu, then the life's), never the
// other way round.
type life = lifecycle.Life

// newLife returns the life of a new dispatcher.
func newLife() *life { return lifecycle.New(ErrRunning, ErrStopped) }

// errInterrupted is start's error when a stop (ctx ending, or Stop)
// interrupted the start-up checks.
var errInterrupted = lifecycle.ErrInterrupted
