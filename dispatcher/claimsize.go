package dispatcher

// claimSize bounds the claims of one coordinator under a statement
// timeout. A claim that runs out of time (a statement_timeout, or the
// operation timeout) halves the size, and the size it ran out at is
// remembered. Until the size is back at BatchSize, it grows by a
// sixteenth of BatchSize after claimGrowAfter full claims in a row at the
// current size, and past the size that ran out of time only after four
// times as many: doubling after every full claim made 32–47% of claims
// time out (statement_timeout 100ms, BatchSize 10,000), since the size
// went straight back to the one that had just failed.
type claimSize struct {
	max  int // BatchSize
	size int
	// timedOutAt is the smallest size that ran out of time since the
	// size was last BatchSize; 0 when none did (claims double back).
	timedOutAt int
	streak     int // full claims in a row at size since it last changed
}

// claimGrowAfter is how many full claims in a row at the current size a
// size that ran out of time waits before growing a step.
const claimGrowAfter = 8

func newClaimSize(batchSize int) claimSize { return claimSize{max: batchSize, size: batchSize} }

// full takes a claim of limit that came back full.
func (s *claimSize) full(limit int) {
	if s.timedOutAt == 0 { // a full claim of limit: twice that may fit
		s.size = max(s.size, min(2*limit, s.max))
		return
	}
	if limit < s.size {
		return // room, not the size, bounded it: it says nothing of the size
	}
	s.streak++
	need := claimGrowAfter
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

// ranOutOfTime takes a claim of limit that ran out of time.
func (s *claimSize) ranOutOfTime(limit int) {
	s.size = min(s.size, max(1, limit/2))
	s.streak = 0
	if s.timedOutAt == 0 || limit < s.timedOutAt {
		s.timedOutAt = limit
	}
}
