package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
)

// FenceSlack is how much later than the database's stamp of a SENT a
// handler start (on the replica's clock, the same machine's) may be
// stamped without counting as started after the event was SENT.
const FenceSlack = 50 * time.Millisecond

// Row is an outbox row at the end of a scenario.
type Row struct {
	ID                   uuid.UUID
	Status               string
	Code                 string // last_error_code, "" for NULL
	Attempts, Recoveries int
}

// status is the row's status, with its last_error_code unless SENT (a
// SENT row keeps the code of an earlier failure).
func (r Row) status() string {
	if r.Status == "SENT" || r.Code == "" {
		return r.Status
	}
	return r.Status + " " + r.Code
}

// Kill is a SIGKILL of a replica process.
type Kill struct {
	Replica string
	// At is when the signal was sent: the process wrote nothing after
	// it. (When its death was seen is no bound: the test process may be
	// slow to reap it, and a run cut at that later time would seem to
	// overlap the next run of its events.)
	At time.Time
}

// Pause is a SIGSTOP of a replica process until its SIGCONT.
type Pause struct {
	Replica  string
	From, To time.Time
}

// Outage is a time the server, or a replica's link to it, was not
// serving: from the moment a restart, stop, read-only spell or network
// fault began until it healed; a termination of backends is an instant
// one.
type Outage struct {
	From, To time.Time
}

// ReplicaStats is what a replica process said about itself when it exited
// cleanly: its goroutines and heap after its dispatcher returned and its
// pool closed.
type ReplicaStats struct {
	Replica    string
	Goroutines int
	HeapBytes  uint64
}

// Input is everything recorded in one scenario.
type Input struct {
	// Ledger holds the event ID of every committed business row: the truth.
	Ledger []uuid.UUID
	// RolledBack holds the event IDs of transactions rolled back on
	// purpose; they must never be delivered (they are not in Ledger, so a
	// run of one is unexpected; this list only names them in the report).
	RolledBack []uuid.UUID
	// Records are the replicas' handler records.
	Records []Record
	// Transitions are the outbox rows' status changes.
	Transitions []Transition
	// Rows are the outbox rows at the end.
	Rows []Row
	// Kills and Pauses are the faults injected into replicas, Outages
	// those of the server and the replicas' links.
	Kills   []Kill
	Pauses  []Pause
	Outages []Outage
	// Faults counts every fault injected, by kind, for the report.
	Faults map[string]int
	// Lease is the replicas' LeaseDuration.
	Lease time.Duration
	// FaultsEnded is when the last fault healed; Drained is when the
	// outbox had no PENDING or PROCESSING row left (zero: never).
	FaultsEnded, Drained time.Time
	// Deadlocks counts "deadlock detected" in the server log.
	Deadlocks int
	// Replicas are the stats of the replicas that exited cleanly.
	Replicas []ReplicaStats
	// MaxGoroutines is the most goroutines a cleanly exited replica may
	// have left; more is reported as a leak. Zero: not checked.
	MaxGoroutines int

	// AtMostOnce says the replicas ran with Delivery AtMostOnce: no event
	// may start twice, and an event whose attempt a kill cut may end FAILED
	// worker_lost without being delivered (see modes.go).
	AtMostOnce bool
	// DeleteSent says the replicas deleted events on success: a delivery
	// is established by a delete in Transitions (Deleted) after a run
	// that ended, not by a SENT row.
	DeleteSent bool
	// Poison names the events whose handler kills its replica every time
	// it starts; they must end PoisonStatus after at most PoisonMaxStarts
	// runs, never delivered, and every other event must be delivered,
	// never dead-lettered (one charged more recoveries than its runs is
	// counted in Report.Overcharged: see poison in modes.go).
	Poison          []uuid.UUID
	PoisonStatus    string
	PoisonMaxStarts int
}

// Run is one handler call: from its Start record to its End or Abort
// record, or to the kill of its replica, or open.
type Run struct {
	ID      uuid.UUID
	Replica string
	Attempt int
	Start   time.Time
	// End is when it ended: its End or Abort record, else the kill of its
	// replica; zero when it never ended.
	End time.Time
	// Outcome is End, Abort, or "" when the run never wrote its end (its
	// replica was killed, or it still ran when recording stopped).
	Outcome Phase
}

// ending says how and when r ended, for a report.
func (r Run) ending() string {
	switch {
	case r.End.IsZero():
		return "it never ended"
	case r.Outcome == "":
		return "its replica was killed at " + r.End.Format(time.StampMicro)
	default:
		return fmt.Sprintf("it wrote %s at %s", r.Outcome, r.End.Format(time.StampMicro))
	}
}

// endOrNever is r.End, or the far future when the run never ended.
func (r Run) endOrNever() time.Time {
	if r.End.IsZero() {
		return time.Unix(1<<40, 0)
	}
	return r.End
}

// Lost is a committed event that no run delivered.
type Lost struct {
	ID     uuid.UUID
	Reason string // final status, and whether a handler ever started
}

// Duplicate is a run of an event after its first run: a redelivery.
type Duplicate struct {
	Run   Run
	Cause string // what ended the run before it: a kill, a pause, a lost lease
}

// Overlap is two runs of one event running at the same time.
type Overlap struct {
	First, Second Run
	// DuringPause is true when First's replica was paused past its lease
	// while First ran: the overlap docs/guarantees.md allows.
	DuringPause bool
}

// Check compares the records of a scenario with its ledger and the
// database's own transitions. It is a pure function of in.
func Check(in Input) Report {
	runs := buildRuns(in.Records, in.Kills)
	rep := Report{
		Events: len(in.Ledger), RolledBack: len(in.RolledBack), Runs: len(runs),
		Faults: in.Faults, Statuses: map[string]int{}, Deadlocks: in.Deadlocks, Replicas: in.Replicas,
		DrainTime: -1,
	}
	if !in.Drained.IsZero() {
		rep.DrainTime = max(in.Drained.Sub(in.FaultsEnded), 0)
	}
	byID := map[uuid.UUID][]Run{}
	for _, r := range runs {
		byID[r.ID] = append(byID[r.ID], r)
	}
	rows := map[uuid.UUID]Row{}
	for _, r := range in.Rows {
		rows[r.ID] = r
		rep.Statuses[r.status()]++
		if r.Status == "PENDING" || r.Status == "PROCESSING" {
			rep.Stuck++
		}
	}
	rep.Lost = excuseLost(lost(in.Ledger, byID, rows), in, rows)
	rep.Unexpected = unexpected(in.Ledger, byID, in.Rows)
	for _, id := range sortedIDs(byID) {
		rs := byID[id]
		rep.Duplicates = append(rep.Duplicates, duplicates(rs, in)...)
		rep.Overlaps = append(rep.Overlaps, overlaps(rs, in.Pauses, in.Lease)...)
	}
	rep.Fencing = append(fencing(in.Transitions), startsAfterSent(runs, in.Transitions, in.Pauses)...)
	checkModes(&rep, in, byID, rows)
	rep.Fairness = fairness(runs, in.Replicas)
	for _, s := range in.Replicas {
		if in.MaxGoroutines > 0 && s.Goroutines > in.MaxGoroutines {
			rep.Leaks = append(rep.Leaks, fmt.Sprintf("%s: %d goroutines left at exit (at most %d expected)",
				s.Replica, s.Goroutines, in.MaxGoroutines))
		}
	}
	return rep
}

// buildRuns pairs each Start record with the next End or Abort record of
// the same event in the same replica; a Start left open ends at the kill
// of its replica, if it was killed.
func buildRuns(records []Record, kills []Kill) []Run {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].At.Before(recs[j].At) })
	killedAt := map[string]time.Time{}
	for _, k := range kills {
		killedAt[k.Replica] = k.At
	}
	type key struct {
		replica string
		id      uuid.UUID
	}
	open := map[key][]int{} // indexes into runs, oldest first
	var runs []Run
	for _, rec := range recs {
		k := key{rec.Replica, rec.ID}
		if rec.Phase == Start {
			open[k] = append(open[k], len(runs))
			runs = append(runs, Run{ID: rec.ID, Replica: rec.Replica, Attempt: rec.Attempt, Start: rec.At})
			continue
		}
		if len(open[k]) == 0 {
			continue // an end without a start cannot be written by the handler; ignore it
		}
		i := open[k][0]
		open[k] = open[k][1:]
		runs[i].End, runs[i].Outcome = rec.At, rec.Phase
	}
	for i := range runs {
		if at, ok := killedAt[runs[i].Replica]; ok && runs[i].Outcome == "" && !at.Before(runs[i].Start) {
			runs[i].End = at
		}
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Start.Before(runs[j].Start) })
	return runs
}

// lost returns the ledger's events with no run that ended with End.
func lost(ledger []uuid.UUID, byID map[uuid.UUID][]Run, rows map[uuid.UUID]Row) []Lost {
	var out []Lost
	for _, id := range ledger {
		started := len(byID[id])
		if slices.ContainsFunc(byID[id], func(r Run) bool { return r.Outcome == End }) {
			continue
		}
		reason := "no outbox row"
		if row, ok := rows[id]; ok {
			reason = row.status()
		}
		if started == 0 {
			reason += ", handler never started"
		} else {
			reason += fmt.Sprintf(", %d runs never ended", started)
		}
		out = append(out, Lost{ID: id, Reason: reason})
	}
	return out
}

// unexpected returns the events that ran, or have an outbox row, without
// a committed business row.
func unexpected(ledger []uuid.UUID, byID map[uuid.UUID][]Run, rows []Row) []uuid.UUID {
	committed := map[uuid.UUID]bool{}
	for _, id := range ledger {
		committed[id] = true
	}
	seen := map[uuid.UUID]bool{}
	var out []uuid.UUID
	add := func(id uuid.UUID) {
		if !committed[id] && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range sortedIDs(byID) {
		add(id)
	}
	for _, r := range rows {
		add(r.ID)
	}
	return out
}

// duplicates returns every run of one event after the first, with the
// cause read from the run before it.
func duplicates(rs []Run, in Input) []Duplicate {
	var out []Duplicate
	for i := 1; i < len(rs); i++ {
		out = append(out, Duplicate{Run: rs[i], Cause: cause(rs[i-1], rs[i], in)})
	}
	return out
}

// cause tells why cur ran again after prev.
func cause(prev, cur Run, in Input) string {
	when := " during the handler"
	if prev.Outcome == End {
		when = " after the handler returned, before its outcome was written"
	}
	for _, k := range in.Kills {
		if k.Replica == prev.Replica && !k.At.Before(prev.Start) && !k.At.After(cur.Start) {
			return "kill of " + prev.Replica + when
		}
	}
	for _, p := range in.Pauses {
		if p.Replica == prev.Replica && p.From.Before(cur.Start) && p.To.After(prev.Start) {
			if prev.Outcome == End && prev.End.After(p.From) {
				when = " during the handler"
			}
			return "pause of " + prev.Replica + when
		}
	}
	for _, o := range in.Outages {
		if o.From.Before(cur.Start) && o.To.After(prev.Start) {
			return "server outage" + when
		}
	}
	if prev.Outcome == Abort {
		return "lease lost: the handler's context ended"
	}
	return "lease lost: the outcome was not recorded"
}

// overlaps returns every pair of runs of one event that ran at once.
func overlaps(rs []Run, pauses []Pause, lease time.Duration) []Overlap {
	var out []Overlap
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			a, b := rs[i], rs[j]
			if !b.Start.Before(a.endOrNever()) {
				continue
			}
			out = append(out, Overlap{First: a, Second: b, DuringPause: pausedPastLease(a, b.Start, pauses, lease)})
		}
	}
	return out
}

// pausedPastLease reports whether run a's replica was paused for longer
// than the lease between a's start and until.
func pausedPastLease(a Run, until time.Time, pauses []Pause, lease time.Duration) bool {
	for _, p := range pauses {
		if p.Replica == a.Replica && p.To.Sub(p.From) > lease && p.From.Before(until) && p.To.After(a.Start) {
			return true
		}
	}
	return false
}

// fencing checks the database's own transitions: at most one SENT per
// event, SENT only out of PROCESSING, written by the replica that claimed
// the token the row held, before that lease's end, and nothing leaves
// SENT.
func fencing(ts []Transition) []string {
	claimer := map[uuid.UUID]string{}
	for _, t := range ts {
		if t.NewStatus == "PROCESSING" && t.NewToken != uuid.Nil {
			claimer[t.NewToken] = t.Writer
		}
	}
	sent := map[uuid.UUID]int{}
	var out []string
	for _, t := range ts {
		if t.OldStatus == "SENT" {
			out = append(out, fmt.Sprintf("%s left SENT for %s (written by %s)", t.ID, t.NewStatus, t.Writer))
		}
		if !success(t) {
			continue
		}
		sent[t.ID]++
		if sent[t.ID] == 2 {
			out = append(out, fmt.Sprintf("%s: more than one %s recorded", t.ID, t.NewStatus))
		}
		switch {
		case t.OldStatus != "PROCESSING":
			out = append(out, fmt.Sprintf("%s: %s written by %s over %s", t.ID, t.NewStatus, t.Writer, t.OldStatus))
		case claimer[t.OldToken] != t.Writer:
			out = append(out, fmt.Sprintf("%s: %s written by %s under a token claimed by %q", t.ID, t.NewStatus, t.Writer, claimer[t.OldToken]))
		case !t.StatementAt.Before(t.OldLeaseUntil):
			// The statement began after the lease had ended, so its test
			// of the lease came later still. (A SENT stamped after the
			// lease by a statement that began before it is no violation:
			// the test passed in time and the write then waited, e.g. on
			// a row lock a claim's recheck held, during which no other
			// claim could take the row.)
			out = append(out, fmt.Sprintf("%s: %s written by %s in a statement that began %v after its lease ended",
				t.ID, t.NewStatus, t.Writer, t.StatementAt.Sub(t.OldLeaseUntil).Round(time.Millisecond)))
		}
	}
	return out
}

// startsAfterSent finds runs that started after their event was SENT:
// the starting worker's lease had ended before its handler started, which
// the dispatcher must never allow (it reads the deadline just before).
// A run whose replica was stopped across the SENT and started its handler
// once resumed is excused: the process may have stopped between reading
// the deadline and the handler's first record, which no process can
// prevent (docs/guarantees.md: a paused process is a lease outlived).
func startsAfterSent(runs []Run, ts []Transition, pauses []Pause) []string {
	sentAt := map[uuid.UUID]time.Time{}
	for _, t := range ts {
		if success(t) {
			if at, ok := sentAt[t.ID]; !ok || t.At.Before(at) {
				sentAt[t.ID] = t.At
			}
		}
	}
	var out []string
	for _, r := range runs {
		at, ok := sentAt[r.ID]
		if !ok || !r.Start.After(at.Add(FenceSlack)) || stoppedAcross(r, at, pauses) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s started its handler %v after the event was SENT",
			r.ID, r.Replica, r.Start.Sub(at).Round(time.Millisecond)))
	}
	return out
}

// stoppedAcross reports whether r's replica was stopped at instant at and
// resumed before r started.
func stoppedAcross(r Run, at time.Time, pauses []Pause) bool {
	for _, p := range pauses {
		if p.Replica == r.Replica && !p.From.After(at) && !p.To.Before(at) && !p.To.After(r.Start) {
			return true
		}
	}
	return false
}

// fairness counts the handler starts of each replica: those of runs, and
// zero for a replica of replicas without a run.
func fairness(runs []Run, replicas []ReplicaStats) Fairness {
	f := Fairness{Starts: map[string]int{}}
	for _, s := range replicas {
		f.Starts[s.Replica] = 0
	}
	total := 0
	for _, r := range runs {
		f.Starts[r.Replica]++
		total++
	}
	if total == 0 {
		return f
	}
	mean := float64(total) / float64(len(f.Starts))
	f.Min, f.Max = float64(total), 0
	for _, n := range f.Starts {
		f.Min, f.Max = min(f.Min, float64(n)/mean), max(f.Max, float64(n)/mean)
	}
	return f
}

// sortedIDs returns m's keys in a fixed order.
func sortedIDs[V any](m map[uuid.UUID]V) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}
