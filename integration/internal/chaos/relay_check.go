package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
)

// Finding is one event the relay checker found wrong, and why.
type Finding struct {
	ID     uuid.UUID
	Reason string
}

// RelayDuplicate is a delivery of an event after its first.
type RelayDuplicate struct {
	// Delivery is the repeat; Prev the delivery of the event just before
	// it, whose batch's cursor move must be absent.
	Delivery, Prev Delivery
	// Explained says a documented window explains it: Prev's token never
	// moved the cursor past the event, and a kill of Prev's replica, a
	// loss of its lease or a server outage came between the two.
	Explained bool
	// Cause says which, or why the duplicate is not explained.
	Cause string
}

// CheckRelay compares a relay scenario's deliveries and cursor log with
// its ledger. It is a pure function of in. See RelayReport for the
// verdicts.
func CheckRelay(in RelayInput) RelayReport {
	ix, tickProblems := newTickIndex(in.Ticks)
	c := relayCheck{in: in, ix: ix, cursor: groupEntries(in.Cursor, in.Group)}
	rep := RelayReport{
		Events: len(in.Ledger), RolledBack: len(in.RolledBack), Deliveries: len(in.Deliveries),
		Ticks: len(in.Ticks), Faults: in.Faults, Cursor: tickProblems, DrainTime: -1,
	}
	if !in.Drained.IsZero() {
		rep.DrainTime = max(in.Drained.Sub(in.FaultsEnded), 0)
	}
	for _, e := range c.cursor {
		if e.Take() {
			rep.Takes++
		}
		if e.Move() {
			rep.Moves++
		}
	}
	c.index()
	rep.Ledger = c.ledgerProblems()
	rep.Lost = c.lost()
	rep.Unexpected, rep.Mismatches = c.unexpected()
	rep.Order = c.order()
	rep.EarlyMoves = c.earlyMoves()
	rep.Cursor = append(rep.Cursor, c.fencing()...)
	rep.Duplicates = c.duplicates()
	return rep
}

// relayCheck is one run of CheckRelay: the input and its indexes.
type relayCheck struct {
	in     RelayInput
	ix     tickIndex
	cursor []CursorEntry // the group's, in log order
	ledger map[uuid.UUID]LedgerEntry
	tick   map[uuid.UUID]int64      // the first tick showing the event committed
	byID   map[uuid.UUID][]Delivery // in time order
	sorted []Delivery               // every delivery in time order
}

// groupEntries returns the entries of group, in their order.
func groupEntries(es []CursorEntry, group string) []CursorEntry {
	var out []CursorEntry
	for _, e := range es {
		if e.Group == group {
			out = append(out, e)
		}
	}
	return out
}

// index builds the ledger, tick and delivery indexes. Deliveries are put
// in time order, stable: one process's records keep their order of
// writing when their stamps are equal.
func (c *relayCheck) index() {
	c.ledger, c.tick, c.byID = map[uuid.UUID]LedgerEntry{}, map[uuid.UUID]int64{}, map[uuid.UUID][]Delivery{}
	for _, l := range c.in.Ledger {
		c.ledger[l.ID] = l
		c.tick[l.ID] = c.ix.first(l.Xid)
	}
	c.sorted = slices.Clone(c.in.Deliveries)
	sort.SliceStable(c.sorted, func(i, j int) bool { return c.sorted[i].At.Before(c.sorted[j].At) })
	for _, d := range c.sorted {
		c.byID[d.ID] = append(c.byID[d.ID], d)
	}
}

// ledgerProblems checks the harness's own truth: one entry per event, and
// each key's versions 1..n with neither repeat nor gap (a writer emits in
// every transaction that bumps its key).
func (c *relayCheck) ledgerProblems() []string {
	var out []string
	versions := map[string][]int64{}
	seen := map[uuid.UUID]bool{}
	for _, l := range c.in.Ledger {
		if seen[l.ID] {
			out = append(out, fmt.Sprintf("ledger: event %s twice", l.ID))
		}
		seen[l.ID] = true
		versions[l.Key] = append(versions[l.Key], l.V)
	}
	for _, k := range slices.Sorted(maps.Keys(versions)) {
		vs := versions[k]
		slices.Sort(vs)
		for i, v := range vs {
			if v != int64(i+1) {
				out = append(out, fmt.Sprintf("ledger: key %s has versions %v, want 1..%d", k, vs, len(vs)))
				break
			}
		}
	}
	return out
}

// lost returns the ledger's events never delivered, each with what the
// cursor log says of it.
func (c *relayCheck) lost() []Finding {
	parked := map[uuid.UUID]bool{}
	for _, id := range c.in.Parked {
		parked[id] = true
	}
	var out []Finding
	for _, l := range c.in.Ledger {
		if len(c.byID[l.ID]) > 0 {
			continue
		}
		tick := c.tick[l.ID]
		var reason string
		switch mv, ok := c.firstCover(l.ID, uuid.Nil); {
		case tick == 0:
			reason = "no tick shows it committed"
		case ok:
			reason = fmt.Sprintf("in tick %d; the cursor moved past it (%d → %d by %s at %s)",
				tick, mv.OldLastTick, max(mv.NewLastTick, mv.NewBatchTick), mv.NewOwner, stamp(mv.At))
		default:
			reason = fmt.Sprintf("in tick %d; the cursor never moved past it", tick)
		}
		if parked[l.ID] {
			reason = "parked; " + reason
		}
		out = append(out, Finding{ID: l.ID, Reason: "never delivered: " + reason})
	}
	return out
}

// unexpected returns the delivered events without a committed business
// row, and the deliveries whose key or version differ from the ledger's.
func (c *relayCheck) unexpected() (unexpected []Finding, mismatches []string) {
	rolledBack := map[uuid.UUID]bool{}
	for _, id := range c.in.RolledBack {
		rolledBack[id] = true
	}
	for _, id := range sortedIDs(c.byID) {
		l, ok := c.ledger[id]
		if !ok {
			reason := "delivered without a committed business row"
			if rolledBack[id] {
				reason = "delivered, but its transaction was rolled back on purpose"
			}
			unexpected = append(unexpected, Finding{ID: id, Reason: reason})
			continue
		}
		for _, d := range c.byID[id] {
			if d.Key != l.Key || d.V != l.V {
				mismatches = append(mismatches, fmt.Sprintf("%s delivered by %s as %s v%d, committed as %s v%d",
					id, d.Replica, d.Key, d.V, l.Key, l.V))
			}
		}
	}
	return unexpected, mismatches
}

// order finds, per key, each first delivery of a version that came after
// the first delivery of a higher version of the key (by the ledger's key
// and version: a delivery's own are checked as mismatches).
func (c *relayCheck) order() []string {
	highest := map[string]Delivery{}
	first := map[uuid.UUID]bool{}
	var out []string
	for _, d := range c.sorted {
		l, ok := c.ledger[d.ID]
		if !ok || first[d.ID] {
			continue
		}
		first[d.ID] = true
		h, seen := highest[l.Key]
		if seen && c.ledger[h.ID].V > l.V {
			out = append(out, fmt.Sprintf("key %s: v%d first delivered by %s at %s, after v%d (by %s at %s)",
				l.Key, l.V, d.Replica, stamp(d.At), c.ledger[h.ID].V, h.Replica, stamp(h.At)))
			continue
		}
		highest[l.Key] = d
	}
	return out
}

// earlyMoves finds cursor moves past a delivered event before its first
// ack: a kill right after such a move would lose the event.
func (c *relayCheck) earlyMoves() []string {
	var out []string
	for _, l := range c.in.Ledger {
		ds := c.byID[l.ID]
		mv, ok := c.firstCover(l.ID, uuid.Nil)
		if len(ds) == 0 || !ok || !mv.At.Before(ds[0].At) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: the cursor moved past it (%d → %d by %s at %s) before its first ack at %s",
			l.ID, mv.OldLastTick, max(mv.NewLastTick, mv.NewBatchTick), mv.NewOwner, stamp(mv.At), stamp(ds[0].At)))
	}
	return out
}

// firstCover returns the first move of the group that marked event id
// done, by token tok, or by any token when tok is uuid.Nil.
func (c *relayCheck) firstCover(id, tok uuid.UUID) (CursorEntry, bool) {
	l := c.ledger[id]
	for _, e := range c.cursor {
		if (tok == uuid.Nil || e.NewToken == tok) && e.covers(c.tick[id], l.Seq) {
			return e, true
		}
	}
	return CursorEntry{}, false
}

// fencing checks the cursor log's moves: forward only, never while the
// group was stopped, under the token that held the row, written by a
// session of the owner that held it (when sessions are named after the
// owners), and in a transaction begun before the lease ended (so that
// no test of the lease, whichever clock it reads, could pass).
func (c *relayCheck) fencing() []string {
	var out []string
	for _, e := range c.cursor {
		if !e.Move() {
			continue
		}
		what := fmt.Sprintf("move %d → %d by %s at %s", e.OldLastTick, max(e.NewLastTick, e.NewBatchTick), e.Writer, stamp(e.At))
		began := e.XactAt
		if began.IsZero() {
			began = e.StatementAt
		}
		switch {
		case e.NewLastTick < e.OldLastTick:
			out = append(out, what+": the cursor went backwards")
		case e.NewStopped != "":
			out = append(out, what+": the group was stopped ("+e.NewStopped+")")
		case e.OldToken == uuid.Nil || e.OldToken != e.NewToken:
			out = append(out, what+": not under the token that held the group")
		case e.Writer != "" && e.OldOwner != "" && e.Writer != e.OldOwner:
			out = append(out, what+": "+e.OldOwner+" held the group")
		case !began.Before(e.OldLeaseUntil):
			out = append(out, fmt.Sprintf("%s: its transaction began %v after the lease ended", what,
				began.Sub(e.OldLeaseUntil).Round(time.Millisecond)))
		}
	}
	return out
}

// duplicates returns every delivery of an event after its first, with
// its explanation.
func (c *relayCheck) duplicates() []RelayDuplicate {
	var out []RelayDuplicate
	for _, id := range sortedIDs(c.byID) {
		ds := c.byID[id]
		for i := 1; i < len(ds); i++ {
			d := RelayDuplicate{Delivery: ds[i], Prev: ds[i-1]}
			d.Explained, d.Cause = c.explain(ds[i-1], ds[i])
			out = append(out, d)
		}
	}
	return out
}

// explain says whether a documented window explains the delivery cur of
// an event after prev. Either the token prev was published under had not
// moved the cursor past the event before cur (its batch's move did not
// happen; the same token may move it after publishing it again), and
// between the two its replica was killed, lost the group's lease, or the
// server was out; or cur was published under a token that had lost the
// group already and never moved past the event (a relay paused past its
// lease publishes what it held before it learns of the loss: its move is
// fenced off).
func (c *relayCheck) explain(prev, cur Delivery) (bool, string) {
	tok, takenAt, ok := c.token(prev)
	if !ok {
		return false, fmt.Sprintf("%s published it at %s without having taken the group", prev.Replica, stamp(prev.At))
	}
	mv, moved := c.firstCover(prev.ID, tok)
	moved = moved && mv.At.Before(cur.At)
	if !moved {
		if cause, ok := c.fault(prev, cur, tok, takenAt); ok {
			return true, cause
		}
	}
	if cause, ok := c.zombie(cur); ok {
		return true, cause
	}
	if moved {
		return false, fmt.Sprintf("%s's token moved the cursor past it (%d → %d at %s), yet %s published it again at %s",
			prev.Replica, mv.OldLastTick, max(mv.NewLastTick, mv.NewBatchTick), stamp(mv.At), cur.Replica, stamp(cur.At))
	}
	return false, fmt.Sprintf("the cursor move after %s's ack is absent, but no kill, lease loss or outage came before %s published it again at %s",
		prev.Replica, cur.Replica, stamp(cur.At))
}

// fault returns the fault between prev and cur that cut the move of
// prev's batch by token tok (taken at takenAt): a kill of prev's replica,
// a take of the group by another token, a server outage.
func (c *relayCheck) fault(prev, cur Delivery, tok uuid.UUID, takenAt time.Time) (string, bool) {
	for _, k := range c.in.Kills {
		if k.Replica == prev.Replica && !k.At.Before(prev.At) && !k.At.After(cur.At) {
			return "kill of " + prev.Replica + " between the ack and the cursor move", true
		}
	}
	if e, ok := c.takenFrom(tok, takenAt, cur.At); ok {
		return fmt.Sprintf("lease of %s lost before the cursor move (group taken by %s at %s)",
			prev.Replica, e.NewOwner, stamp(e.At)), true
	}
	for _, o := range c.in.Outages {
		if !o.To.Before(prev.At) && !o.From.After(cur.At) {
			return "server outage between the ack and the cursor move", true
		}
	}
	return "", false
}

// zombie explains cur when its token had lost the group before cur and
// never moved the cursor past the event.
func (c *relayCheck) zombie(cur Delivery) (string, bool) {
	tok, takenAt, ok := c.token(cur)
	if !ok {
		return "", false
	}
	if _, moved := c.firstCover(cur.ID, tok); moved {
		return "", false
	}
	e, lost := c.takenFrom(tok, takenAt, cur.At)
	if !lost {
		return "", false
	}
	return fmt.Sprintf("lease of %s lost before it published again (group taken by %s at %s); its move was fenced off",
		cur.Replica, e.NewOwner, stamp(e.At)), true
}

// takenFrom returns the first take of the group by a token other than
// tok after tok's take at takenAt and no later than until.
func (c *relayCheck) takenFrom(tok uuid.UUID, takenAt, until time.Time) (CursorEntry, bool) {
	for _, e := range c.cursor {
		if e.Take() && e.NewToken != tok && e.At.After(takenAt) && !e.At.After(until) {
			return e, true
		}
	}
	return CursorEntry{}, false
}

// token returns the group lease token d was published under, and when it
// was taken: d's own, or that of its replica's last take before d.
func (c *relayCheck) token(d Delivery) (uuid.UUID, time.Time, bool) {
	var tok uuid.UUID
	var at time.Time
	for _, e := range c.cursor {
		if !e.Take() || e.At.After(d.At) {
			continue
		}
		if (d.Token != uuid.Nil && e.NewToken == d.Token) || (d.Token == uuid.Nil && e.NewOwner == d.Replica) {
			tok, at = e.NewToken, e.At
		}
	}
	return tok, at, tok != uuid.Nil
}

// stamp formats t for a report line.
func stamp(t time.Time) string { return t.Format(time.StampMicro) }
