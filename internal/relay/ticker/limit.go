package ticker

import (
	"errors"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// xidRate estimates the transaction id rate from the xmax the parts'
// statement sees: an exponentially weighted mean of the rates between
// two calls.
type xidRate struct {
	rate float64 // xids per second; 0 until two calls were seen
	xmax uint64
	at   time.Time
}

// rateWeight is the weight of the newest interval in the mean.
const rateWeight = 0.25

// observe records xmax seen at (monotonic time).
func (r *xidRate) observe(xmax uint64, at time.Time) {
	if !r.at.IsZero() && xmax >= r.xmax {
		if secs := at.Sub(r.at).Seconds(); secs > 0 {
			now := float64(xmax-r.xmax) / secs
			if r.rate == 0 {
				r.rate = now
			} else {
				r.rate += rateWeight * (now - r.rate)
			}
		}
	}
	r.xmax, r.at = xmax, at
}

// errLimit lets an error through at most once per every for each kind.
type errLimit struct {
	every time.Duration
	last  map[string]time.Time // kind -> when last let through
}

// maxKinds bounds the kinds remembered; past it they are forgotten.
const maxKinds = 64

// allow reports whether err may be reported at now.
func (l *errLimit) allow(err error, now time.Time) bool {
	k := kind(err)
	if at, ok := l.last[k]; ok && now.Sub(at) < l.every {
		return false
	}
	if len(l.last) >= maxKinds {
		clear(l.last)
	}
	l.last[k] = now
	return true
}

// kind is what makes two errors the same one: the store's sentinel they
// match, else their SQLSTATE, else their text (the snapshot-backwards
// error's text changes with every call: its xmax).
func kind(err error) string {
	for _, s := range []error{store.ErrSnapshotBackwards, store.ErrLeaseLost} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if c := pgerr.Code(err); c != "" {
		return "SQLSTATE " + c
	}
	return err.Error()
}
