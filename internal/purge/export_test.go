package purge

// FailedStatements returns the dead-letter batch statements: the plain
// one, the one under the retention lock and the count.
func (s *Store) FailedStatements() (batch, excl, count string) {
	return s.failed, s.failedExcl, s.failedCount
}

// SweepSQL is the sweep's statement for the SENT strays.
var SweepSQL = sweepSQL

// PlanRanges is planRanges.
var PlanRanges = planRanges
