package tally

import (
	"maps"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

const (
	// MaxTypes bounds the distinct types a count looks at (the
	// dispatcher's waiting count) or keeps (Unroutable).
	MaxTypes = 1000
	// WarnEvery is the shortest time between two WARNs for one type.
	WarnEvery = 5 * time.Minute
)

// Waiting holds the latest count of waiting events per type and when each
// type was last logged. Not the reporter's log limiter (loglimit): its 10s
// interval would log each waiting type at every count (every
// RecoverEvery-th poll, 10s by default), where one line per type every
// WarnEvery says enough about a state that lasts. The zero Waiting is
// ready to use.
type Waiting struct {
	mu     sync.Mutex
	counts map[string]int64
	warned map[string]time.Time
}

// Update keeps counts and returns those to log now: their type was not
// logged in the last WarnEvery. Types no longer waiting are
// forgotten, so that one that waits again is logged at once.
func (w *Waiting) Update(counts []lease.TypeCount, now time.Time) (warn []lease.TypeCount) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts = make(map[string]int64, len(counts))
	warned := make(map[string]time.Time, len(counts))
	for _, c := range counts {
		w.counts[c.Type] = c.Count
		last, ok := w.warned[c.Type]
		if !ok || now.Sub(last) >= WarnEvery {
			warn = append(warn, c)
			last = now
		}
		warned[c.Type] = last
	}
	w.warned = warned
	return warn
}

// Counts returns a copy of the latest counts by type and their sum; nil
// and 0 when no type is waiting.
func (w *Waiting) Counts() (byType map[string]int64, total int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.counts) == 0 {
		return nil, 0
	}
	for _, n := range w.counts {
		total += n
	}
	return maps.Clone(w.counts), total
}

// Unroutable counts, per type, the events released as unroutable and when
// each type was last logged. The zero Unroutable is ready to use.
type Unroutable struct {
	mu     sync.Mutex
	counts map[string]uint64
	warned map[string]time.Time
}

// Add counts events by type and returns the types to log now: those not
// logged in the last WarnEvery. At most MaxTypes types are
// kept; events of further types are counted in the dispatcher's
// Stats.Unroutable only.
func (u *Unroutable) Add(byType map[string]int64, now time.Time) (warn []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.counts == nil {
		u.counts, u.warned = map[string]uint64{}, map[string]time.Time{}
	}
	for typ, n := range byType {
		if _, ok := u.counts[typ]; ok || len(u.counts) < MaxTypes {
			u.counts[typ] += uint64(n)
		}
		if last, ok := u.warned[typ]; !ok || now.Sub(last) >= WarnEvery {
			u.warned[typ] = now
			warn = append(warn, typ)
		}
	}
	for typ, at := range u.warned {
		if now.Sub(at) >= 2*WarnEvery {
			delete(u.warned, typ) // bounded by the types of the last ten minutes
		}
	}
	return warn
}

// Counts returns a copy of the counts by type; nil when none was counted.
func (u *Unroutable) Counts() map[string]uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.counts) == 0 {
		return nil
	}
	return maps.Clone(u.counts)
}
