package main

import (
	"fmt"
	"slices"
	"strings"
)

// writeWAL writes the WAL-per-transition table of the sitting's walcost
// run (the first that verified).
func writeWAL(b *strings.Builder, runs []run) {
	i := slices.IndexFunc(runs, func(r run) bool { return r.spec.group == groupWAL && r.err == nil && r.res.Verified })
	if i < 0 {
		if slices.ContainsFunc(runs, func(r run) bool { return r.spec.group == groupWAL }) {
			b.WriteString("## WAL per transition (issue 25)\n\nThe walcost run failed: no table.\n\n")
		}
		return
	}
	r := runs[i]
	fmt.Fprintf(b, "## WAL per transition (issue 25)\n\n`go run ./benchmarks %s`, on a fresh database migrated to schema version %v "+
		"(`migrations.Migrate`, what `outboxctl migrate` runs). Each variant writes %d events, one per transaction, then claims them %v at a time, "+
		"renews each claimed batch once (a heartbeat) and completes it: batch i with history (i mod 3 = 0), deleted (1) or retried (2). "+
		"pgoutbox runs its own statements (`emitter.Emit`, `internal/lease`'s Claim, Renew and Complete, as the dispatcher sends them) on a row with an "+
		"aggregate id (so a key for the order index) and on one without; the minimal outbox runs `benchmarks/minimal.go`'s statements on a table with "+
		"pgoutbox's columns and defaults and the minimal outbox's two indexes (primary key, due PENDING rows), with the keyed row and the default fillfactor (100; `outbox_events` has 50). "+
		"The log (issue 27) runs `emitter.Emit` of the keyed event into a log (`outbox.KindLog`), its insert only: the relay never updates a row. "+
		"Event: a 270-byte JSON payload, one `traceparent` header.\n\n"+
		"Counted from `pg_walinspect` between the start and the commit of each transaction, only records whose block belongs to the run's own database "+
		"(no other session's WAL, no commit records, as EXPLAIN's WAL figures): records, bytes without full-page images (FPI bytes depend on "+
		"when the last checkpoint was, not on the statement), FPIs (records carrying one), index entries (B-tree leaf inserts), and "+
		"n_tup_upd / n_tup_hot_upd of the phase's transactions (`pg_stat_xact_user_tables`). The last column is WAL records per event by relation.\n\n",
		flagsOf(r.spec), r.res.Params["schema_version"], r.res.N, r.res.Params["batch"])
	b.WriteString("| variant | transition | events | WAL records/event | index entries/event | WAL bytes/event (no FPI) | FPIs | HOT / updated rows | records/event by relation |\n" +
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, p := range r.res.WAL {
		hot := "–"
		if p.Updates > 0 {
			hot = fmt.Sprintf("%d / %d", p.HOTUpdates, p.Updates)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.2f | %.2f | %.0f | %d | %s | %s |\n", p.Variant, p.Phase, p.Events, p.perEvent(p.Records),
			p.perEvent(p.IndexEntries), p.perEvent(p.Bytes-p.FPIBytes), p.FPIs, hot, byRelation(p))
	}
	b.WriteString("\nWAL records per event of insert + claim + completion:\n\n| variant | with history (minimal: UPDATE to SENT) | with delete |\n| --- | ---: | ---: |\n")
	for _, v := range []string{variantKeyed, variantUnkeyed, variantMinimal} {
		h, okH := recordsPerEvent(r.res.WAL, v, []string{phaseInsert, phaseClaim, phaseHistory})
		d, okD := recordsPerEvent(r.res.WAL, v, []string{phaseInsert, phaseClaim, phaseDelete})
		fmt.Fprintf(b, "| %s | %s | %s |\n", v, orDash(h, okH), orDash(d, okD))
	}
	b.WriteString("\n")
}

// byRelation lists the relations a phase wrote, most records first, with
// records per event (those under 0.01 left out).
func byRelation(p walPhase) string {
	names := make([]string, 0, len(p.Written))
	for n, v := range p.Written {
		if p.perEvent(v) >= 0.01 {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, c string) int {
		if d := p.Written[c] - p.Written[a]; d != 0 {
			return int(d)
		}
		return strings.Compare(a, c)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, p.perEvent(p.Written[n]))
	}
	return strings.Join(parts, ", ")
}

func orDash(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeTypes writes the claims of the many-types drains beside the
// single-type drain's: claims, claims out of time, the slowest claim.
func writeTypes(b *strings.Builder, runs []run) {
	var rs []run
	for _, r := range runs {
		if r.spec.group == groupTypes || (r.spec.group == groupDispatch && strings.HasPrefix(r.spec.label, dispatchDefaults[0])) {
			rs = append(rs, r)
		}
	}
	if !slices.ContainsFunc(rs, func(r run) bool { return r.spec.group == groupTypes }) {
		return
	}
	b.WriteString("### claims of the many-types drains (and of the single-type drain)\n\n" +
		"| configuration | round | events/s | claims | claims out of time | slowest claim ms | errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rs {
		if r.err != nil || !r.res.Verified {
			fmt.Fprintf(b, "| %s | %d | failed: %v |||||\n", r.spec.label, r.round, r.err)
			continue
		}
		p := r.res.Params
		fmt.Fprintf(b, "| %s | %d | %s | %v | %v | %v | %v |\n", r.spec.label, r.round, num(r.res.EventsPerSec), p["claims"], p["claim_timeouts"],
			p["slowest_claim_ms"], p["errors"])
	}
	b.WriteString("\n")
}
