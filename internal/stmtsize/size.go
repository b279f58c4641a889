package stmtsize

import (
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
)

// Size bounds the claims of one coordinator (or the renewals and start
// marks of one dispatcher) under a statement timeout. A claim that runs out of time (a statement_timeout, or the
// operation timeout) halves the size, and the size it ran out at is
// remembered. Until the size is back at BatchSize, it grows by a
// sixteenth of BatchSize after GrowAfter full claims in a row at the
// current size, and past the size that ran out of time only after four
// times as many: doubling after every full claim made 32–47% of claims
// time out (statement_timeout 100ms, BatchSize 10,000), since the size
// went straight back to the one that had just failed.
type Size struct {
	max  int // BatchSize
	size int
	// timedOutAt is the smallest size that ran out of time since the
	// size was last BatchSize; 0 when none did (claims double back).
	timedOutAt int
	streak     int // full claims in a row at size since it last changed
}

// GrowAfter is how many full claims in a row at the current size a
// size that ran out of time waits before growing a step.
const GrowAfter = 8

// New returns a Size that starts, and grows back to, batchSize (the
// BatchSize of claims, or lease.MaxRefsPerStatement for ref writes).
func New(batchSize int) Size { return Size{max: batchSize, size: batchSize} }

// Limit is the size the next statement may take at the most.
func (s *Size) Limit() int { return s.size }

// Full takes a claim of limit that came back full.
func (s *Size) Full(limit int) {
	if s.timedOutAt == 0 { // a full claim of limit: twice that may fit
		s.size = max(s.size, min(2*limit, s.max))
		return
	}
	if limit < s.size {
		return // room, not the size, bounded it: it says nothing of the size
	}
	s.streak++
	need := GrowAfter
	step := max(1, s.max/16)
	if s.size+step >= s.timedOutAt {
		need *= 4
	}
	if s.streak < need {
		return
	}
	s.size, s.streak = min(s.size+step, s.max), 0
	if s.size == s.max {
		s.timedOutAt = 0
	}
}

// RanOutOfTime takes a claim of limit that ran out of time.
func (s *Size) RanOutOfTime(limit int) {
	s.size = min(s.size, max(1, limit/2))
	s.streak = 0
	if s.timedOutAt == 0 || limit < s.timedOutAt {
		s.timedOutAt = limit
	}
}

// TimedOut reports whether the server ended a statement
// (statement_timeout, or a cancel request): it answers, and a smaller
// statement may fit.
func TimedOut(err error) bool {
	return pgerr.Code(err) == pgerr.QueryCanceled
}
