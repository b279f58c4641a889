package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Report is what Check found.
type Report struct {
	Events, RolledBack, Runs int
	Faults                   map[string]int
	Lost                     []Lost
	Unexpected               []uuid.UUID
	Duplicates               []Duplicate
	Overlaps                 []Overlap
	Fencing                  []string
	// Statuses counts the final rows by status, and by last_error_code
	// unless SENT ("SENT", "FAILED worker_lost").
	Statuses map[string]int
	Stuck    int
	// DrainTime is from FaultsEnded to Drained; negative when the outbox
	// never drained.
	DrainTime time.Duration
	Deadlocks int
	Replicas  []ReplicaStats
	Leaks     []string
	// Modes are the violations of the rules of Input's AtMostOnce,
	// DeleteSent and Poison (see modes.go).
	Modes []string
	// Cut and CutLive count the committed events that ended FAILED
	// worker_lost under AtMostOnce, claimed last by a replica that was
	// killed (Cut) or that lived on and lost its lease (CutLive); Deleted
	// counts the rows deleted on success under DeleteSent; Poisoned the
	// poison events committed and MaxPoisonStarts the most runs one of
	// them had.
	Cut, CutLive, Deleted, Poisoned, MaxPoisonStarts int
	// Overcharged counts the events other than poison ones that were
	// SENT with more recoveries than runs (see poison in modes.go).
	Overcharged int
	// atMostOnce and deleteSent are Input's, for the figures.
	atMostOnce, deleteSent bool
	// Fairness is how evenly the replicas shared the handler starts.
	Fairness Fairness
}

// Fairness is how evenly the replicas shared the handler starts.
type Fairness struct {
	// Starts counts the handler starts of each replica: every replica that
	// recorded a start, and every replica that exited cleanly (with none,
	// if it was starved).
	Starts map[string]int
	// Min and Max are the fewest and the most starts of one replica, as
	// fractions of the mean over Starts: 1 and 1 is a perfectly even
	// share, Min 0 a replica that never started a handler. Both are 0 when
	// no replica started one.
	Min, Max float64
}

// UnexcusedOverlaps counts the overlaps not explained by a pause past the
// lease.
func (r Report) UnexcusedOverlaps() int {
	n := 0
	for _, o := range r.Overlaps {
		if !o.DuringPause {
			n++
		}
	}
	return n
}

// Violations lists what breaks docs/guarantees.md: lost or unexpected
// events, overlaps outside pauses past the lease, fencing violations,
// rows left PENDING or PROCESSING, an outbox that never drained,
// deadlocks, leaked goroutines. Empty when the run kept every promise.
// Duplicates are not violations: delivery is at least once.
func (r Report) Violations() []string {
	var v []string
	add := func(n int, format string, args ...any) {
		if n > 0 {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	for _, l := range r.Lost {
		v = append(v, fmt.Sprintf("lost %s: %s", l.ID, l.Reason))
	}
	for _, id := range r.Unexpected {
		v = append(v, fmt.Sprintf("unexpected %s: delivered or emitted without a committed business row", id))
	}
	for _, o := range r.Overlaps {
		if !o.DuringPause {
			v = append(v, fmt.Sprintf("overlap %s: %s started at %s while %s ran since %s (%s; no pause past the lease)",
				o.First.ID, o.Second.Replica, o.Second.Start.Format(time.StampMicro), o.First.Replica,
				o.First.Start.Format(time.StampMicro), o.First.ending()))
		}
	}
	for _, f := range r.Fencing {
		v = append(v, "fencing: "+f)
	}
	add(r.Stuck, "%d rows left PENDING or PROCESSING", r.Stuck)
	if r.DrainTime < 0 {
		v = append(v, "the outbox never drained")
	}
	add(r.Deadlocks, "%d \"deadlock detected\" in the server log", r.Deadlocks)
	v = append(v, r.Leaks...)
	v = append(v, r.Modes...)
	return v
}

// Figures returns the report's figures as "name value" pairs, in the order
// docs/reliability.md's table shows them.
func (r Report) Figures() [][2]string {
	faults := make([]string, 0, len(r.Faults))
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		faults = append(faults, fmt.Sprintf("%d %s", r.Faults[k], k))
	}
	drain := "never"
	if r.DrainTime >= 0 {
		drain = r.DrainTime.Round(10 * time.Millisecond).String()
	}
	statuses := make([]string, 0, len(r.Statuses))
	for _, k := range slices.Sorted(maps.Keys(r.Statuses)) {
		statuses = append(statuses, fmt.Sprintf("%d %s", r.Statuses[k], k))
	}
	during := len(r.Overlaps) - r.UnexcusedOverlaps()
	return append([][2]string{
		{"events committed", fmt.Sprint(r.Events)},
		{"events rolled back", fmt.Sprint(r.RolledBack)},
		{"faults injected", strings.Join(faults, ", ")},
		{"handler runs", fmt.Sprint(r.Runs)},
		{"lost", fmt.Sprint(len(r.Lost))},
		{"unexpected", fmt.Sprint(len(r.Unexpected))},
		{"duplicated", duplicatesFigure(r.Duplicates)},
		{"overlap", fmt.Sprintf("%d (+%d during pauses past the lease)", r.UnexcusedOverlaps(), during)},
		{"fencing violations", fmt.Sprint(len(r.Fencing))},
		{"final statuses", strings.Join(statuses, ", ")},
		{"time to drain", drain},
		{"deadlocks", fmt.Sprint(r.Deadlocks)},
		{"replicas at clean exit", replicasFigure(r.Replicas)},
		{"fairness", fairnessFigure(r.Fairness)},
	}, r.modeFigures()...)
}

// fairnessFigure gives the fewest and most handler starts of one replica
// relative to the mean.
func fairnessFigure(f Fairness) string {
	return fmt.Sprintf("%d replicas: fewest starts %.2f, most %.2f of the mean", len(f.Starts), f.Min, f.Max)
}

// duplicatesFigure counts the duplicates by cause, the cause's kind being
// its text up to the replica name or colon.
func duplicatesFigure(ds []Duplicate) string {
	by := map[string]int{}
	for _, d := range ds {
		kind := d.Cause
		switch {
		case strings.HasPrefix(kind, "kill"):
			kind = "kill"
		case strings.HasPrefix(kind, "pause"):
			kind = "pause"
		case strings.HasPrefix(kind, "server outage"):
			kind = "server outage"
		default:
			kind = "lease lost"
		}
		by[kind]++
	}
	parts := []string{fmt.Sprint(len(ds))}
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d %s", by[k], k))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return parts[0] + " (" + strings.Join(parts[1:], ", ") + ")"
}

// replicasFigure gives the most goroutines and heap among the replicas.
func replicasFigure(rs []ReplicaStats) string {
	if len(rs) == 0 {
		return "none"
	}
	g, h := 0, uint64(0)
	for _, s := range rs {
		g, h = max(g, s.Goroutines), max(h, s.HeapBytes)
	}
	return fmt.Sprintf("%d: at most %d goroutines, %.1f MiB heap", len(rs), g, float64(h)/(1<<20))
}

// String is the figures as an aligned table, then the violations.
func (r Report) String() string {
	var b strings.Builder
	for _, f := range r.Figures() {
		fmt.Fprintf(&b, "%-24s %s\n", f[0], f[1])
	}
	for _, v := range r.Violations() {
		b.WriteString("VIOLATION " + v + "\n")
	}
	return b.String()
}
