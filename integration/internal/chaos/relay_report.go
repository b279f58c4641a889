package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// RelayReport is what CheckRelay found.
type RelayReport struct {
	// Events and RolledBack count the ledger and the events rolled back
	// on purpose; Deliveries the acks recorded; Ticks the ticks copied;
	// Moves and Takes the group's cursor moves and lease takes.
	Events, RolledBack, Deliveries, Ticks, Moves, Takes int
	Faults                                              map[string]int
	// Lost are committed events never delivered.
	Lost []Finding
	// Unexpected are delivered events with no committed business row
	// (e.g. a rolled back writer's).
	Unexpected []Finding
	// Duplicates are the deliveries after an event's first, explained or
	// not.
	Duplicates []RelayDuplicate
	// Order lists, per key, the first delivery of a version that came
	// after the first delivery of a higher one.
	Order []string
	// EarlyMoves are cursor moves past an event before its first ack.
	EarlyMoves []string
	// Cursor lists what is wrong in the cursor log (a move backwards,
	// under another token, after the lease, while stopped) and in the
	// ticks (a snapshot that went backwards).
	Cursor []string
	// Mismatches are deliveries whose key or version differ from the
	// ledger's; Ledger the harness's own inconsistencies (an event twice,
	// a key's versions not 1..n).
	Mismatches, Ledger []string
	// DrainTime is from FaultsEnded to Drained; negative when not every
	// event was delivered.
	DrainTime time.Duration
}

// Unexplained counts the duplicates no documented window explains.
func (r RelayReport) Unexplained() int {
	n := 0
	for _, d := range r.Duplicates {
		if !d.Explained {
			n++
		}
	}
	return n
}

// Violations lists what breaks the relay's promises (docs/relay-design.md
// section 7): lost or unexpected events, unexplained duplicates, per-key
// order violations, cursor moves before the ack or outside the lease,
// deliveries that differ from the ledger, an inconsistent ledger, and a
// log never drained. Empty when the run kept every promise. Explained
// duplicates are not violations: delivery is at least once.
func (r RelayReport) Violations() []string {
	var v []string
	for _, f := range r.Lost {
		v = append(v, fmt.Sprintf("lost %s: %s", f.ID, f.Reason))
	}
	for _, f := range r.Unexpected {
		v = append(v, fmt.Sprintf("unexpected %s: %s", f.ID, f.Reason))
	}
	for _, d := range r.Duplicates {
		if !d.Explained {
			v = append(v, fmt.Sprintf("unexplained duplicate %s (by %s at %s, call %d): %s",
				d.Delivery.ID, d.Delivery.Replica, stamp(d.Delivery.At), d.Delivery.Call, d.Cause))
		}
	}
	for _, s := range r.Order {
		v = append(v, "order: "+s)
	}
	for _, s := range r.EarlyMoves {
		v = append(v, "early move: "+s)
	}
	for _, s := range r.Cursor {
		v = append(v, "cursor: "+s)
	}
	for _, s := range r.Mismatches {
		v = append(v, "mismatch: "+s)
	}
	v = append(v, r.Ledger...)
	if r.DrainTime < 0 {
		v = append(v, "not every committed event was delivered")
	}
	return v
}

// Figures returns the report's figures as "name value" pairs, in the
// order docs/reliability.md's relay tables show them.
func (r RelayReport) Figures() [][2]string {
	faults := make([]string, 0, len(r.Faults))
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		faults = append(faults, fmt.Sprintf("%d %s", r.Faults[k], k))
	}
	drain := "never"
	if r.DrainTime >= 0 {
		drain = r.DrainTime.Round(10 * time.Millisecond).String()
	}
	return [][2]string{
		{"events committed", fmt.Sprint(r.Events)},
		{"events rolled back", fmt.Sprint(r.RolledBack)},
		{"faults injected", strings.Join(faults, ", ")},
		{"broker acks", fmt.Sprint(r.Deliveries)},
		{"ticks, cursor moves", fmt.Sprintf("%d, %d (%d lease takes)", r.Ticks, r.Moves, r.Takes)},
		{"lost", fmt.Sprint(len(r.Lost))},
		{"unexpected", fmt.Sprint(len(r.Unexpected))},
		{"duplicated", relayDuplicatesFigure(r.Duplicates)},
		{"per-key order violations", fmt.Sprint(len(r.Order))},
		{"early cursor moves", fmt.Sprint(len(r.EarlyMoves))},
		{"cursor log violations", fmt.Sprint(len(r.Cursor))},
		{"time to drain", drain},
	}
}

// relayDuplicatesFigure counts the duplicates by the kind of their cause:
// kill, lease lost, server outage, unexplained.
func relayDuplicatesFigure(ds []RelayDuplicate) string {
	by := map[string]int{}
	for _, d := range ds {
		kind := "unexplained"
		switch {
		case !d.Explained:
		case strings.HasPrefix(d.Cause, "kill"):
			kind = "kill"
		case strings.HasPrefix(d.Cause, "lease"):
			kind = "lease lost"
		default:
			kind = "server outage"
		}
		by[kind]++
	}
	parts := make([]string, 0, len(by))
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d %s", by[k], k))
	}
	if len(parts) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", len(ds), strings.Join(parts, ", "))
}

// String is the figures as an aligned table, then the violations.
func (r RelayReport) String() string {
	var b strings.Builder
	for _, f := range r.Figures() {
		fmt.Fprintf(&b, "%-24s %s\n", f[0], f[1])
	}
	for _, v := range r.Violations() {
		b.WriteString("VIOLATION " + v + "\n")
	}
	return b.String()
}
