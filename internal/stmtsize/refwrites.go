package stmtsize

import (
	"sync"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// WriteRefs runs write, a renewal or a start mark of n refs in statements
// of at most per refs each (one round trip, one transaction), under mu
// (the keeper's lease-writes lock, see internal/keeper), which also
// guards size. When the server ends a statement for lack of time (a statement_timeout), the whole round trip
// rolled back and changed nothing: write runs again at once with
// statements half as large, down to one ref each, and later writes stay
// that small until full ones have succeeded for a while (see Size),
// so that a renewal shrinks within its beat as claims and completions
// shrink, rather than lose every lease it held. timedOut is told of each
// statement timeout that is retried.
func WriteRefs(mu *sync.Mutex, size *Size, n int, write func(per int) (lease.RefResult, error), timedOut func(error)) (lease.RefResult, error) {
	for {
		res, again, err := writeRefsOnce(mu, size, n, write)
		if !again {
			return res, err
		}
		timedOut(err)
	}
}

// writeRefsOnce is one try of WriteRefs; again reports a statement
// timeout that a smaller statement may fit.
func writeRefsOnce(mu *sync.Mutex, size *Size, n int, write func(per int) (lease.RefResult, error)) (res lease.RefResult, again bool, err error) {
	mu.Lock()
	defer mu.Unlock()
	per := size.size
	res, err = write(per)
	switch {
	case err == nil:
		if n >= per {
			size.Full(per)
		}
	case TimedOut(err) && per > 1:
		size.RanOutOfTime(per)
		return res, true, err
	}
	return res, false, err
}
