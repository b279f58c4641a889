package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// side picks the runs of one side of a target: a group and label prefixes.
type side struct {
	group    string
	prefixes []string
}

// has reports whether the spec belongs to the side.
func (s side) has(sp spec) bool {
	return sp.group == s.group && slices.ContainsFunc(s.prefixes, func(p string) bool { return strings.HasPrefix(sp.label, p) })
}

// target is one figure the issues ask for, computed in each round: the
// ratio of the best events/s of ours over the best of ref (figure nil), or
// a figure of ours' run (a latency, claims per event, claim timeouts, a
// WAL ratio). It is met when it has a value in every round that ran its
// specs and the median is ≥ min (when min > 0), ≤ max (when max > 0) and
// 0 (when zero); with none of them it is reported only.
type target struct {
	name, refName string
	ours, ref     side
	min, max      float64
	zero          bool
	figure        func(Result) (float64, bool)
	format        string // of one value, e.g. "%.2f×"
}

// Issue 25's bounds: single-event emit against the minimal INSERT; batch
// emit and dispatch against the minimal outbox, and a drain with handlers
// for many types against the single-type drain; dispatch at the defaults
// against the best of River and Watermill; WAL records per event of
// insert + claim + completion against the minimal outbox with the same row.
const (
	minEmitRatio = 0.9
	minRatio     = 0.85
	minPeerRatio = 1.5
	maxWALRatio  = 1.5
)

// Issue 27's bounds for the log (docs/relay-design.md §8): Emit into a
// log against the minimal INSERT (single events) and against the minimal
// multi-row INSERT and COPY (batches); WAL records per event of the
// log's insert against the minimal outbox's insert of the same row.
const (
	minLogEmitRatio  = 0.95
	minLogBatchRatio = 0.9
	maxLogWALRatio   = 1.2
)

// Issue 27's bounds for the relay (docs/relay-design.md §8): its drain of
// a backlog to a no-op publisher at MaxBatch 1,000 against the minimal
// outbox's dispatch at batch 1,000, and to kfake and the local JetStream
// against pgoutbox's dispatcher to the same broker (the best of its
// defaults and B=1000 C=1000); commit → publish at 1,000 events/s with
// the default tick; the other events' rate while one transaction stays
// open for 60 s over their rate without it.
const (
	minRelayRatio       = 2.0
	minRelayBrokerRatio = 1.5
	maxRelayP50MS       = 15
	maxRelayP99MS       = 50
	minRelayLongTxFlow  = 0.8
)

// logOurs and logBatchOurs are the log's emit labels (prefixes).
var (
	logOurs      = []string{"log Emit"}
	logBatchOurs = []string{"log Emit ×1000"}
)

// emitOurs are pgoutbox's single-event emit labels (the prefix of both the
// 1- and the 4-writer spec, told apart by group).
var emitOurs = []string{"pgoutbox Emit"}

// Label prefixes of the dispatch targets' sides (the trailing space keeps
// "B=100 " from matching "B=1000").
var (
	batchOurs        = []string{"pgoutbox Emit ×1000"}
	dispatchDefaults = []string{"pgoutbox B=100 "}
	dispatchB1000    = []string{"pgoutbox B=1000 "}
	peers            = []string{"river", "watermill"}
)

// singleType is the reference of the many-types targets: the default
// drain, whose dispatcher handles its one type.
const singleType = "single-type drain (pgoutbox B=100 C=100 defaults)"

// claimsPerEventBefore is the claims per event of the 5,000/s wake-ups-on
// latency run before issue 16 (docs/benchmarks.md of 2026-12-01: 933 claim
// cycles for 10 s at 2,105/s held); issue 16 asks not to exceed it.
const claimsPerEventBefore = 0.044

var targets = []target{
	ratio("single-event emit, 1 writer", groupEmit1, emitOurs, "raw INSERT", []string{"raw INSERT"}, 0),
	ratio("single-event emit, 1 writer", groupEmit1, emitOurs, "minimal INSERT", []string{"minimal INSERT"}, minEmitRatio),
	ratio("single-event emit, 4 writers", groupEmit, emitOurs, "raw INSERT", []string{"raw INSERT"}, 0),
	ratio("single-event emit, 4 writers", groupEmit, emitOurs, "minimal INSERT", []string{"minimal INSERT"}, minEmitRatio),
	ratio("1,000-event batch emit", groupBatch, batchOurs, "raw COPY", []string{"raw COPY"}, 0),
	ratio("1,000-event batch emit", groupBatch, batchOurs, "minimal multi-row INSERT", []string{"minimal INSERT ×1000"}, minRatio),
	ratio("1,000-event batch emit", groupBatch, batchOurs, "minimal COPY", []string{"minimal COPY"}, minRatio),
	ratio("dispatch B=100 C=100 (defaults)", groupDispatch, dispatchDefaults, "best raw-sql B=100", []string{"raw-sql B=100 "}, 0),
	ratio("dispatch B=100 C=100 (defaults)", groupDispatch, dispatchDefaults, "best minimal B=100", []string{"minimal B=100 "}, minRatio),
	ratio("dispatch B=100 C=100 (defaults)", groupDispatch, dispatchDefaults, "best minimal-delete B=100", []string{"minimal-delete B=100 "}, minRatio),
	ratio("dispatch B=1000 C=1000", groupDispatch, dispatchB1000, "best raw-sql B=1000", []string{"raw-sql B=1000 "}, 0),
	ratio("dispatch B=1000 C=1000", groupDispatch, dispatchB1000, "best minimal B=1000", []string{"minimal B=1000 "}, minRatio),
	ratio("dispatch B=1000 C=1000", groupDispatch, dispatchB1000, "best minimal-delete B=1000", []string{"minimal-delete B=1000 "}, minRatio),
	ratio("dispatch DeleteSent B=100 C=100", groupDispatch, []string{"pgoutbox DeleteSent B=100 "}, "best minimal-delete B=100", []string{"minimal-delete B=100 "}, 0),
	ratio("dispatch DeleteSent B=1000 C=1000", groupDispatch, []string{"pgoutbox DeleteSent B=1000 "}, "best minimal-delete B=1000", []string{"minimal-delete B=1000 "}, 0),
	ratio("dispatch B=100 C=100 (defaults)", groupDispatch, dispatchDefaults, "best of River/Watermill", peers, minPeerRatio),
	ratio("dispatch, best pgoutbox", groupDispatch, []string{"pgoutbox"}, "best of River/Watermill", peers, 0),
	ratio("log emit, 1 writer (issue 27)", groupEmit1, logOurs, "minimal INSERT", []string{"minimal INSERT"}, minLogEmitRatio),
	ratio("log emit, 4 writers (issue 27)", groupEmit, logOurs, "minimal INSERT", []string{"minimal INSERT"}, minLogEmitRatio),
	ratio("log 1,000-event batch emit (issue 27)", groupBatch, logBatchOurs, "minimal multi-row INSERT", []string{"minimal INSERT ×1000"}, minLogBatchRatio),
	ratio("log 1,000-event batch emit (issue 27)", groupBatch, logBatchOurs, "minimal COPY", []string{"minimal COPY"}, minLogBatchRatio),
	ratio("relay → no-op, MaxBatch 1000 (issue 27)", groupDispatch, []string{"relay → no-op"}, "best minimal B=1000", []string{"minimal B=1000 "}, minRelayRatio),
	ratio("relay, backlog ticked every 1,000 → no-op, MaxBatch 1000 (issue 27)", groupDispatch, []string{"relay (backlog ticked"}, "best minimal B=1000",
		[]string{"minimal B=1000 "}, 0),
	ratio("relay → in-process kfake (issue 27)", groupDispatch, []string{"relay → in-process kfake"}, "best kafkapub dispatcher → kfake",
		[]string{"kafkapub → in-process kfake"}, minRelayBrokerRatio),
	ratio("relay → local NATS JetStream (issue 27)", groupDispatch, []string{"relay → local NATS JetStream"}, "best natspub dispatcher → JetStream",
		[]string{"natspub → local NATS JetStream"}, minRelayBrokerRatio),
	relayLatencyTarget("relay commit → publish p50, 1,000/s, default tick (issue 27)", maxRelayP50MS, latencyP50),
	relayLatencyTarget("relay commit → publish p99, 1,000/s, default tick (issue 27)", maxRelayP99MS, latencyP99),
	{name: "relay: other events' rate with one transaction open 60 s, over without (issue 27)", refName: "the same run before it began",
		ours: side{groupRelayLongTx, []string{"relay, one transaction open"}}, min: minRelayLongTxFlow, figure: paramFigure("flow_ratio"), format: "%.2f×"},
	typesRatio("50"),
	typesRatio("200"),
	typesTimeouts("50"),
	typesTimeouts("200"),
	walRatio("WAL records/event, insert + claim + completion with history", variantKeyed, phaseHistory, "minimal outbox, same row (UPDATE to SENT)", maxWALRatio),
	walRatio("WAL records/event, insert + claim + completion with DeleteSent", variantKeyed, phaseDelete, "minimal-delete, same row", maxWALRatio),
	walRatio("WAL records/event, insert + claim + completion with history, no aggregate id", variantUnkeyed, phaseHistory, "minimal outbox, same row (UPDATE to SENT)", 0),
	walRatio("WAL records/event, insert + claim + completion with DeleteSent, no aggregate id", variantUnkeyed, phaseDelete, "minimal-delete, same row", 0),
	walInsertRatio("WAL records/event, log insert (issue 27)", variantLog, "minimal outbox insert, same row", maxLogWALRatio),
	{name: "heartbeat renewal: index entries per event", ours: side{groupWAL, []string{"WAL per transition"}}, zero: true,
		figure: walFigure(func(ps []walPhase) (float64, bool) { return perEventOf(ps, variantKeyed, phaseRenew, indexEntries) }), format: "%.2f"},
	{name: "heartbeat renewal: HOT updates per updated row", ours: side{groupWAL, []string{"WAL per transition"}},
		figure: walFigure(renewalHOTShare), format: "%.2f"},
	latencyTarget("commit → handler start p50, 100/s, wake-ups on (issue 16)", "100", 5, latencyP50, "%.1f ms"),
	latencyTarget("commit → handler start p99, 100/s, wake-ups on (issue 16)", "100", 25, latencyP99, "%.1f ms"),
	latencyTarget("commit → handler start p50, 1,000/s, wake-ups on (issue 16)", "1000", 5, latencyP50, "%.1f ms"),
	latencyTarget("commit → handler start p99, 1,000/s, wake-ups on (issue 16)", "1000", 25, latencyP99, "%.1f ms"),
	latencyTarget("claims per event, 5,000/s, wake-ups on (issue 16)", "5000", claimsPerEventBefore, claimsPerEvent, "%.3f"),
}

// typesRatio is the drain with handlers for types types against the
// single-type drain of the same round.
func typesRatio(types string) target {
	return target{name: "drain, handlers for " + types + " types", refName: singleType,
		ours: side{groupTypes, []string{types + " types"}}, ref: side{groupDispatch, dispatchDefaults}, min: minRatio, format: "%.2f×"}
}

// typesTimeouts is the claims that ran out of time in the drain with
// handlers for types types: none allowed.
func typesTimeouts(types string) target {
	return target{name: "drain, handlers for " + types + " types: claims out of time", ours: side{groupTypes, []string{types + " types"}},
		zero: true, figure: paramFigure("claim_timeouts"), format: "%.0f"}
}

// walRatio is pgoutbox's WAL records per event of insert, claim and the
// completion phase (variant's row) over the minimal outbox's on the same
// row, from the walcost run.
func walRatio(name, variant, completion, refName string, maximum float64) target {
	phases := []string{phaseInsert, phaseClaim, completion}
	return target{name: name, refName: refName, ours: side{groupWAL, []string{"WAL per transition"}}, max: maximum, format: "%.2f×",
		figure: walFigure(func(ps []walPhase) (float64, bool) {
			ours, ok1 := recordsPerEvent(ps, variant, phases)
			ref, ok2 := recordsPerEvent(ps, variantMinimal, phases)
			if !ok1 || !ok2 || ref == 0 {
				return 0, false
			}
			return ours / ref, true
		})}
}

// walInsertRatio is variant's WAL records per event of its insert over
// the minimal outbox's insert of the same row, from the walcost run.
func walInsertRatio(name, variant, refName string, maximum float64) target {
	return target{name: name, refName: refName, ours: side{groupWAL, []string{"WAL per transition"}}, max: maximum, format: "%.2f×",
		figure: walFigure(func(ps []walPhase) (float64, bool) {
			ours, ok1 := recordsPerEvent(ps, variant, []string{phaseInsert})
			ref, ok2 := recordsPerEvent(ps, variantMinimal, []string{phaseInsert})
			if !ok1 || !ok2 || ref == 0 {
				return 0, false
			}
			return ours / ref, true
		})}
}

// walFigure is a figure of a walcost run's phases.
func walFigure(f func([]walPhase) (float64, bool)) func(Result) (float64, bool) {
	return func(r Result) (float64, bool) {
		if len(r.WAL) == 0 {
			return 0, false
		}
		return f(r.WAL)
	}
}

// phaseOf is the variant's phase (ok: it exists and had events).
func phaseOf(ps []walPhase, variant, phase string) (walPhase, bool) {
	for _, p := range ps {
		if p.Variant == variant && p.Phase == phase {
			return p, p.Events > 0
		}
	}
	return walPhase{}, false
}

// recordsPerEvent is the sum over phases of the variant's WAL records
// per event.
func recordsPerEvent(ps []walPhase, variant string, phases []string) (float64, bool) {
	sum := 0.0
	for _, name := range phases {
		p, ok := phaseOf(ps, variant, name)
		if !ok {
			return 0, false
		}
		sum += p.perEvent(p.Records)
	}
	return sum, true
}

func indexEntries(p walPhase) int64 { return p.IndexEntries }

// perEventOf is a counter of the variant's phase per event.
func perEventOf(ps []walPhase, variant, phase string, counter func(walPhase) int64) (float64, bool) {
	p, ok := phaseOf(ps, variant, phase)
	if !ok {
		return 0, false
	}
	return p.perEvent(counter(p)), true
}

// renewalHOTShare is the share of pgoutbox's renewal updates that were HOT.
func renewalHOTShare(ps []walPhase) (float64, bool) {
	p, ok := phaseOf(ps, variantKeyed, phaseRenew)
	if !ok || p.Updates == 0 {
		return 0, false
	}
	return float64(p.HOTUpdates) / float64(p.Updates), true
}

// paramFigure reads a numeric parameter of the run.
func paramFigure(name string) func(Result) (float64, bool) {
	return func(r Result) (float64, bool) {
		switch v := r.Params[name].(type) {
		case int:
			return float64(v), true
		case int64:
			return float64(v), true
		case uint64:
			return float64(v), true
		case float64:
			return v, true
		}
		return 0, false
	}
}

// latencyTarget bounds a figure of the wake-ups-on, poll 1s latency run
// at rate events/s (default emitter settings) by maximum.
func latencyTarget(name, rate string, maximum float64, figure func(Result) (float64, bool), format string) target {
	return target{name: name, ours: side{groupLatency, []string{"wake-ups on, poll 1s, " + rate + "/s"}}, max: maximum, figure: figure, format: format}
}

// relayLatencyTarget bounds a figure of the relay's latency run at 1,000
// events/s by maximum.
func relayLatencyTarget(name string, maximum float64, figure func(Result) (float64, bool)) target {
	return target{name: name, ours: side{groupRelayLatency, []string{"relay, default tick, 1000/s"}}, max: maximum, figure: figure, format: "%.1f ms"}
}

func latencyP50(r Result) (float64, bool) { return deref(r.P50MS) }
func latencyP99(r Result) (float64, bool) { return deref(r.P99MS) }

func deref(v *float64) (float64, bool) {
	if v == nil {
		return 0, false
	}
	return *v, true
}

// claimsPerEvent is the latency run's claim cycles per event.
func claimsPerEvent(r Result) (float64, bool) {
	v, ok := r.Params["claims_per_event"].(float64)
	return v, ok
}

// ratio is a target of ours' best events/s over ref's in group.
func ratio(name, group string, ours []string, refName string, ref []string, minimum float64) target {
	return target{name: name, refName: refName, ours: side{group, ours}, ref: side{group, ref}, min: minimum, format: "%.2f×"}
}

// uses reports whether the target needs the spec's runs.
func (t target) uses(sp spec) bool {
	return t.ours.has(sp) || (t.figure == nil && t.ref.has(sp))
}

// best is the highest verified events/s of a round among the side's runs
// (0 when none).
func best(runs []run, s side, round int) float64 {
	v := 0.0
	for _, r := range runs {
		if r.round == round && r.err == nil && r.res.Verified && s.has(r.spec) {
			v = max(v, r.res.EventsPerSec)
		}
	}
	return v
}

// failed reports whether a run of the side failed or did not verify in the
// round: its best is then unknown, and a ratio against the rest would
// flatter whichever side lost its fastest run.
func failed(runs []run, s side, round int) bool {
	return slices.ContainsFunc(runs, func(r run) bool {
		return r.round == round && s.has(r.spec) && (r.err != nil || !r.res.Verified)
	})
}

// sample is a target's figure in one round: ran when the round ran any of
// its specs, ok when every side it needs has a verified run.
type sample struct {
	v       float64
	ran, ok bool
}

// sample computes the target in one round; a missing side, or a side
// with a failed run, is not ok, never a division by zero.
func (t target) sample(runs []run, round int) sample {
	s := sample{ran: slices.ContainsFunc(runs, func(r run) bool { return r.round == round && t.uses(r.spec) })}
	if t.figure == nil {
		ours, ref := best(runs, t.ours, round), best(runs, t.ref, round)
		if ours > 0 && ref > 0 && !failed(runs, t.ours, round) && !failed(runs, t.ref, round) {
			s.v, s.ok = ours/ref, true
		}
		return s
	}
	for _, r := range runs {
		if r.round == round && r.err == nil && r.res.Verified && t.ours.has(r.spec) {
			s.v, s.ok = t.figure(r.res)
			return s
		}
	}
	return s
}

// samples are the target's samples of rounds 1..rounds.
func (t target) samples(runs []run, rounds int) []sample {
	out := make([]sample, rounds)
	for r := range rounds {
		out[r] = t.sample(runs, r+1)
	}
	return out
}

// verdict is the median of the ok samples (have: there was one) and
// whether the target is met: some round ran it, every round that ran it
// has a value, and the median is within the bounds.
func (t target) verdict(ss []sample) (median float64, have, met bool) {
	var vs []float64
	complete := true
	for _, s := range ss {
		if s.ran && !s.ok {
			complete = false
		}
		if s.ok {
			vs = append(vs, s.v)
		}
	}
	median, have = medianOf(vs), len(vs) > 0
	met = complete && have && (t.min == 0 || median >= t.min) && (t.max == 0 || median <= t.max) && (!t.zero || median == 0)
	return median, have, met
}

// required is false for a figure only reported.
func (t target) required() bool { return t.min > 0 || t.max > 0 || t.zero }

// requirement is the target's bound as the report shows it.
func (t target) requirement() string {
	switch {
	case t.min > 0:
		return "≥ " + fmt.Sprintf(t.format, t.min)
	case t.max > 0:
		return "≤ " + fmt.Sprintf(t.format, t.max)
	case t.zero:
		return "0"
	}
	return "reported"
}

func writeRatios(b *strings.Builder, runs []run, rounds int) {
	b.WriteString("## Targets (issue 25): within each round, against the raw references\n\n" +
		"Every ratio is pgoutbox's best events/s over the reference's best in the same round: raw-sql is the raw loop on pgoutbox's own table, " +
		"minimal the hand-written outbox (`-case minimal`, described in `benchmarks/analysis.md`), completing to SENT, and minimal-delete the same loop completing by a fenced DELETE " +
		"(`-case minimal -mode dispatch-delete`). A round with a side missing or failed has no value and the target is not met. " +
		"The many-types rows compare a drain whose events are spread over 50 or 200 types, with a handler per type, to the default single-type drain of the same round, " +
		"and count the claims that ran out of time (OnError: statement timeout or the operation's deadline). " +
		"The WAL rows come from the WAL-per-transition run (`-case walcost`, below), the latency rows from the wake-ups-on latency runs with default emitter settings " +
		"(both once in `make bench`, in every round in `make bench/targets`).\n\n" +
		"| target | against | required |")
	for r := 1; r <= rounds; r++ {
		fmt.Fprintf(b, " round %d |", r)
	}
	b.WriteString(" median | met? |\n| --- | --- | ---: |" + strings.Repeat(" ---: |", rounds) + " ---: | --- |\n")
	for _, t := range targets {
		ss := t.samples(runs, rounds)
		fmt.Fprintf(b, "| %s | %s | %s |", t.name, cmp.Or(t.refName, "–"), t.requirement())
		for _, s := range ss {
			b.WriteString(" " + t.cell(s) + " |")
		}
		m, have, met := t.verdict(ss)
		fmt.Fprintf(b, " **%s** | %s |\n", t.cell(sample{v: m, ok: have}), metCell(met, t.required()))
	}
	b.WriteString("\n")
}

// cell formats one sample: its value, "failed" when its round ran without
// one, "–" when the round did not run it.
func (t target) cell(s sample) string {
	switch {
	case s.ok:
		return fmt.Sprintf(t.format, s.v)
	case s.ran:
		return "failed"
	}
	return "–"
}

func metCell(met, required bool) string {
	switch {
	case !required:
		return "–"
	case met:
		return "met"
	}
	return "**missed**"
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
