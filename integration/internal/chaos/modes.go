package chaos

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Deleted is the NewStatus the transition log gives a row deleted (by
// DeleteSent on success): its status before the delete is OldStatus.
const Deleted = "DELETED"

// workerLost is the final status of an event whose started attempt a
// lost worker cut, when it is not recovered for another run.
const workerLost = "FAILED worker_lost"

// success reports whether t records an event's success: a SENT, or a
// delete (DeleteSent deletes on success, and nothing else deletes in a
// scenario).
func success(t Transition) bool {
	return t.NewStatus == "SENT" || t.NewStatus == Deleted
}

// excuseLost drops from lost what the scenario's mode allows: poison
// events (judged by checkModes), and under AtMostOnce an event FAILED
// worker_lost (docs/guarantees.md: an attempt whose lease expired is not
// run again, nor an event marked started whose handler never began;
// atMostOnce checks that each such FAILED came after its lease's end).
func excuseLost(lost []Lost, in Input, rows map[uuid.UUID]Row) []Lost {
	poison := idSet(in.Poison)
	var out []Lost
	for _, l := range lost {
		switch {
		case poison[l.ID]:
		case in.AtMostOnce && rows[l.ID].status() == workerLost:
		default:
			out = append(out, l)
		}
	}
	return out
}

// checkModes adds to rep the violations of in's mode and poison rules,
// and their figures.
func checkModes(rep *Report, in Input, byID map[uuid.UUID][]Run, rows map[uuid.UUID]Row) {
	rep.atMostOnce, rep.deleteSent = in.AtMostOnce, in.DeleteSent
	if in.AtMostOnce {
		rep.Modes = append(rep.Modes, atMostOnce(in, byID, rows, rep)...)
	}
	if in.DeleteSent {
		rep.Modes = append(rep.Modes, deletes(in, byID, rows, rep)...)
	}
	if len(in.Poison) > 0 {
		rep.Modes = append(rep.Modes, poison(in, byID, rows, rep)...)
	}
}

// atMostOnce checks that no event started twice, and that every event
// FAILED worker_lost became so by a recovery whose statement began once
// the lease had ended. It counts those whose claimer was killed (Cut)
// apart from those whose claimer lived on (CutLive: it lost its lease,
// e.g. its renewals failed).
func atMostOnce(in Input, byID map[uuid.UUID][]Run, rows map[uuid.UUID]Row, rep *Report) []string {
	var out []string
	for _, id := range sortedIDs(byID) {
		if n := len(byID[id]); n > 1 {
			out = append(out, fmt.Sprintf("at-most-once: %s started %d times", id, n))
		}
	}
	claimers := lastClaimers(in.Transitions)
	killed := killedReplicas(in.Kills)
	failed := map[uuid.UUID]Transition{}
	for _, t := range in.Transitions {
		if t.NewStatus == "FAILED" {
			failed[t.ID] = t
		}
	}
	for _, id := range in.Ledger {
		if rows[id].status() != workerLost {
			continue
		}
		if killed[claimers[id]] {
			rep.Cut++
		} else {
			rep.CutLive++
		}
		switch t, ok := failed[id]; {
		case !ok:
			out = append(out, fmt.Sprintf("at-most-once: %s FAILED worker_lost with no FAILED transition logged", id))
		case t.OldStatus != "PROCESSING" || t.StatementAt.Before(t.OldLeaseUntil):
			out = append(out, fmt.Sprintf("at-most-once: %s FAILED worker_lost by %s out of %s, in a statement that began %v before its lease ended",
				id, t.Writer, t.OldStatus, t.OldLeaseUntil.Sub(t.StatementAt).Round(time.Millisecond)))
		}
	}
	return out
}

// deletes checks every delete: it follows a run of the deleting replica
// that ended (End) before it, no row is deleted but out of PROCESSING
// (fencing checks the token and lease), and nothing happens to an event
// after its delete. A SENT row under DeleteSent is a violation too.
func deletes(in Input, byID map[uuid.UUID][]Run, rows map[uuid.UUID]Row, rep *Report) []string {
	var out []string
	deletedAt := map[uuid.UUID]time.Time{}
	for _, t := range in.Transitions {
		if at, ok := deletedAt[t.ID]; ok {
			out = append(out, fmt.Sprintf("delete-sent: %s changed %s -> %s by %s, %v after its delete",
				t.ID, t.OldStatus, t.NewStatus, t.Writer, t.At.Sub(at).Round(time.Millisecond)))
		}
		if t.NewStatus != Deleted {
			continue
		}
		rep.Deleted++
		if _, ok := deletedAt[t.ID]; !ok {
			deletedAt[t.ID] = t.At
		}
		if !slices.ContainsFunc(byID[t.ID], func(r Run) bool {
			return r.Replica == t.Writer && r.Outcome == End && !r.End.After(t.At.Add(FenceSlack))
		}) {
			out = append(out, fmt.Sprintf("delete-sent: %s deleted by %s, which had no run of it that ended before", t.ID, t.Writer))
		}
	}
	for _, id := range sortedIDs(rows) {
		if rows[id].Status == "SENT" {
			out = append(out, fmt.Sprintf("delete-sent: %s left SENT, not deleted", id))
		}
	}
	return out
}

// poison checks the poison events (each ends PoisonStatus after at most
// PoisonMaxStarts runs, never a success) and the others (never
// dead-lettered). An innocent charged more recoveries than its runs (a
// claim's start mark, or a suspect marked and not yet started, when a
// poison event beside it killed the replica: guarantees.md allows one
// charge per distinct poison death) is counted in Overcharged.
func poison(in Input, byID map[uuid.UUID][]Run, rows map[uuid.UUID]Row, rep *Report) []string {
	var out []string
	isPoison := idSet(in.Poison)
	succeeded := map[uuid.UUID]bool{}
	for _, t := range in.Transitions {
		succeeded[t.ID] = succeeded[t.ID] || success(t)
	}
	for _, id := range in.Ledger {
		row, runs := rows[id], len(byID[id])
		if !isPoison[id] {
			switch {
			case row.Status == "FAILED":
				out = append(out, fmt.Sprintf("poison: innocent %s dead-lettered (%s) after %d runs", id, row.status(), runs))
			case row.Status == "SENT" && row.Recoveries > runs:
				// Allowed once per distinct poison death beside it
				// (guarantees.md): counted, not judged.
				rep.Overcharged++
			}
			continue
		}
		rep.Poisoned++
		rep.MaxPoisonStarts = max(rep.MaxPoisonStarts, runs)
		switch {
		case succeeded[id]:
			out = append(out, fmt.Sprintf("poison: %s recorded a success", id))
		case row.status() != in.PoisonStatus:
			out = append(out, fmt.Sprintf("poison: %s ended %q, not %q", id, row.status(), in.PoisonStatus))
		case runs > in.PoisonMaxStarts:
			out = append(out, fmt.Sprintf("poison: %s started %d times, more than %d", id, runs, in.PoisonMaxStarts))
		}
	}
	return out
}

// lastClaimers maps each event to the replica that last claimed it.
func lastClaimers(ts []Transition) map[uuid.UUID]string {
	out := map[uuid.UUID]string{}
	for _, t := range ts {
		if t.NewStatus == "PROCESSING" {
			out[t.ID] = t.Writer
		}
	}
	return out
}

// killedReplicas is the set of replicas killed.
func killedReplicas(kills []Kill) map[string]bool {
	out := map[string]bool{}
	for _, k := range kills {
		out[k.Replica] = true
	}
	return out
}

// idSet is ids as a set.
func idSet(ids []uuid.UUID) map[uuid.UUID]bool {
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// modeFigures are the figures of the mode and poison rules, only those
// the scenario used.
func (r Report) modeFigures() [][2]string {
	var out [][2]string
	if r.atMostOnce {
		out = append(out, [2]string{"FAILED worker_lost, not run again", fmt.Sprintf(
			"%d (%d claimed by a replica then killed, %d by a live replica that lost its lease)", r.Cut+r.CutLive, r.Cut, r.CutLive)})
	}
	if r.deleteSent {
		out = append(out, [2]string{"rows deleted on success", fmt.Sprint(r.Deleted)})
	}
	if r.Poisoned > 0 {
		out = append(out, [2]string{"poison events", fmt.Sprintf("%d, at most %d starts each", r.Poisoned, r.MaxPoisonStarts)},
			[2]string{"innocents charged beyond their runs", fmt.Sprint(r.Overcharged)})
	}
	return out
}
