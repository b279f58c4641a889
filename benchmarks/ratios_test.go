package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeRun is a verified run of the spec labelled label in group at round,
// at eps events/s.
func fakeRun(group, label string, round int, eps float64) run {
	return run{spec: spec{label: label, group: group}, round: round, res: Result{EventsPerSec: eps, Verified: true}}
}

func targetNamed(t *testing.T, name, ref string) target {
	t.Helper()
	for _, tg := range targets {
		if tg.name == name && tg.refName == ref {
			return tg
		}
	}
	t.Fatalf("no target %q against %q", name, ref)
	return target{}
}

func TestTargetRatio(t *testing.T) {
	t.Parallel()
	tg := targetNamed(t, "dispatch B=100 C=100 (defaults)", "best minimal B=100")
	runs := []run{
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 1, 900),
		fakeRun(groupDispatch, "minimal B=100 W=4", 1, 1000),
		fakeRun(groupDispatch, "minimal B=1000 W=2", 1, 5000), // another batch size: not the reference
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 2, 800),
		fakeRun(groupDispatch, "minimal B=100 W=4", 2, 1000),
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 3, 1000),
		fakeRun(groupDispatch, "minimal B=100 W=4", 3, 1000),
	}
	ss := tg.samples(runs, 3)
	require.Equal(t, []sample{{0.9, true, true}, {0.8, true, true}, {1, true, true}}, ss)
	m, have, met := tg.verdict(ss)
	require.InDelta(t, 0.9, m, 1e-9)
	require.True(t, have)
	require.True(t, met)

	runs[4].err = errors.New("boom") // round 2's minimal run failed
	ss = tg.samples(runs, 3)
	require.Equal(t, sample{ran: true}, ss[1])
	require.Equal(t, "failed", tg.cell(ss[1]))
	_, _, met = tg.verdict(ss)
	require.False(t, met, "a round with a side missing cannot meet the target")
}

func TestTargetMissingSide(t *testing.T) {
	t.Parallel()
	tg := targetNamed(t, "single-event emit, 1 writer", "minimal INSERT")
	ours := []run{fakeRun(groupEmit1, "pgoutbox Emit, 1 writer", 1, 2000)}
	ss := tg.samples(ours, 1)
	require.Equal(t, []sample{{ran: true}}, ss)
	m, have, met := tg.verdict(ss)
	require.Zero(t, m)
	require.False(t, have)
	require.False(t, met)

	theirsOnly := []run{fakeRun(groupEmit1, "minimal INSERT, 1 writer", 1, 2000)}
	_, _, met = tg.verdict(tg.samples(theirsOnly, 1))
	require.False(t, met)

	_, _, met = tg.verdict(tg.samples(nil, 3))
	require.False(t, met, "a target no round ran is not met")

	wrongGroup := []run{fakeRun(groupEmit, "pgoutbox Emit", 1, 2000), fakeRun(groupEmit1, "minimal INSERT, 1 writer", 1, 2000)}
	_, _, met = tg.verdict(tg.samples(wrongGroup, 1))
	require.False(t, met, "the 4-writer run does not stand in for the 1-writer one")
}

func TestTargetLatency(t *testing.T) {
	t.Parallel()
	tg := targetNamed(t, "commit → handler start p50, 100/s, wake-ups on (issue 16)", "")
	lat := func(round int, p50 float64) run {
		r := fakeRun(groupLatency, "wake-ups on, poll 1s, 100/s", round, 100)
		r.res.P50MS = &p50
		return r
	}
	notMine := lat(1, 1)
	notMine.spec.label = "wake-ups on, notify in every Emit, poll 1s, 100/s"
	ss := tg.samples([]run{notMine, lat(1, 4), lat(2, 6), lat(3, 3)}, 3)
	m, _, met := tg.verdict(ss)
	require.InDelta(t, 4, m, 1e-9)
	require.True(t, met)
	_, _, met = tg.verdict(tg.samples([]run{lat(1, 6), lat(2, 5.5)}, 3))
	require.False(t, met)
	require.Equal(t, "–", tg.cell(tg.sample([]run{lat(1, 4)}, 2)), "round 2 did not run it (make bench: latency runs once)")
}

func TestTargetSpecs(t *testing.T) {
	t.Parallel()
	var labels []string
	for _, s := range targetSpecs(false) {
		labels = append(labels, s.label)
	}
	for _, want := range []string{"pgoutbox Emit", "minimal INSERT, 1 writer", "raw COPY ×1000", "minimal INSERT ×1000", "minimal B=100 W=4",
		"minimal B=1000 W=2", "minimal-delete B=100 W=4", "minimal-delete B=1000 W=2", "pgoutbox DeleteSent B=100 C=100",
		"50 types", "200 types", "WAL per transition", "river default, 100 workers", "watermill forwarder B=1000", "wake-ups on, poll 1s, 5000/s",
		"relay → no-op, MaxBatch 1000", "relay → local NATS JetStream, MaxBatch 5000 (default)", "kafkapub → in-process kfake, B=1000 C=1000",
		"relay, default tick, 1000/s", "relay, one transaction open 60s, 1000/s"} {
		require.Contains(t, labels, want)
	}
	for _, not := range []string{"notify in every Emit (NotifyEveryEmit)", "B=1 C=1000", "wake-ups off, poll 1s, 100/s",
		"wake-ups on, notify in every Emit, poll 1s, 100/s", "payload 100 B"} {
		require.NotContains(t, labels, not)
	}
	_, _, err := suiteSpecs(Options{Only: "targets", Out: defaultOptions().Out})
	require.ErrorContains(t, err, "partial report")
	_, _, err = suiteSpecs(Options{Only: "nope"})
	require.ErrorContains(t, err, "unknown -only")
}

func TestWriteRatios(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	writeRatios(&b, []run{fakeRun(groupEmit1, "pgoutbox Emit, 1 writer", 1, 2000)}, 2)
	out := b.String()
	require.Contains(t, out, "| single-event emit, 1 writer | minimal INSERT | ≥ 0.90× | failed | – | **–** | **missed** |")
	require.Contains(t, out, "| single-event emit, 1 writer | raw INSERT | reported | failed | – | **–** | – |")
	require.Contains(t, out, "| claims per event, 5,000/s, wake-ups on (issue 16) | – | ≤ 0.044 |")
	require.Contains(t, out, "| drain, handlers for 200 types: claims out of time | – | 0 |")
	require.Contains(t, out, "| heartbeat renewal: index entries per event | – | 0 |")
}

// A reference side of several runs whose best run failed in a round must
// not be scored against its slower runs only: that ratio is inflated, and
// the round is incomplete.
func TestTargetFailedBestReferenceIsNotMet(t *testing.T) {
	tg := targetNamed(t, "dispatch, best pgoutbox", "best of River/Watermill")
	tuned := fakeRun(groupDispatch, "river tuned, 2000 workers", 1, 0)
	tuned.err = errors.New("river tuned crashed")
	tuned.res.Verified = false
	runs := []run{
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 1, 100),
		fakeRun(groupDispatch, "river default, 100 workers", 1, 20),
		tuned,
	}
	_, _, met := tg.verdict(tg.samples(runs, 1))
	require.False(t, met, "the best River run failed: 100/20 = 5x against the slow default only")
}

// The dispatch sides' prefixes keep each reference to its own runs:
// minimal is not minimal-delete, the defaults are not DeleteSent nor
// B=1000.
func TestTargetSidesDoNotOverlap(t *testing.T) {
	t.Parallel()
	runs := []run{
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 1, 900),
		fakeRun(groupDispatch, "pgoutbox DeleteSent B=100 C=100", 1, 5000),
		fakeRun(groupDispatch, "pgoutbox B=1000 C=1000", 1, 5000),
		fakeRun(groupDispatch, "minimal B=100 W=4", 1, 1000),
		fakeRun(groupDispatch, "minimal-delete B=100 W=4", 1, 3000),
		fakeRun(groupDispatch, "watermill forwarder B=1000", 1, 450),
		fakeRun(groupDispatch, "river default, 100 workers", 1, 100),
	}
	for _, c := range []struct {
		name, ref string
		want      float64
	}{
		{"dispatch B=100 C=100 (defaults)", "best minimal B=100", 0.9},
		{"dispatch B=100 C=100 (defaults)", "best minimal-delete B=100", 0.3},
		{"dispatch B=100 C=100 (defaults)", "best of River/Watermill", 2},
		{"dispatch DeleteSent B=100 C=100", "best minimal-delete B=100", 5000.0 / 3000},
	} {
		s := targetNamed(t, c.name, c.ref).sample(runs, 1)
		require.True(t, s.ok, "%s against %s", c.name, c.ref)
		require.InDelta(t, c.want, s.v, 1e-9, "%s against %s", c.name, c.ref)
	}
}

// A many-types drain is compared with the single-type drain of the same
// round, which lives in the dispatch group.
func TestTargetTypesRatio(t *testing.T) {
	t.Parallel()
	tg := targetNamed(t, "drain, handlers for 50 types", singleType)
	runs := []run{
		fakeRun(groupDispatch, "pgoutbox B=100 C=100 (defaults)", 1, 1000),
		fakeRun(groupTypes, "50 types", 1, 800),
		fakeRun(groupTypes, "200 types", 1, 100),
	}
	s := tg.sample(runs, 1)
	require.Equal(t, sample{v: 0.8, ran: true, ok: true}, s)
	_, _, met := tg.verdict([]sample{s})
	require.False(t, met, "0.80× is under 0.85×")
}

// A bound of zero is met by 0 only, and not by a round without a value.
func TestTargetZero(t *testing.T) {
	t.Parallel()
	tg := targetNamed(t, "drain, handlers for 50 types: claims out of time", "")
	withTimeouts := func(round int, timeouts int64) run {
		r := fakeRun(groupTypes, "50 types", round, 800)
		r.res.Params = map[string]any{"claim_timeouts": timeouts}
		return r
	}
	_, _, met := tg.verdict(tg.samples([]run{withTimeouts(1, 0), withTimeouts(2, 0)}, 2))
	require.True(t, met)
	_, _, met = tg.verdict(tg.samples([]run{withTimeouts(1, 0), withTimeouts(2, 3), withTimeouts(3, 1)}, 3))
	require.False(t, met, "median 1 timeout")
	noParam := fakeRun(groupTypes, "50 types", 1, 800)
	_, _, met = tg.verdict(tg.samples([]run{noParam}, 1))
	require.False(t, met, "a run without the count has no value")
	require.Equal(t, "0", tg.requirement())
}

// The WAL ratio sums insert, claim and one completion kind per event of
// each side, from the walcost run's phases.
func TestTargetWALRatio(t *testing.T) {
	t.Parallel()
	phase := func(variant, name string, events int, records, index int64) walPhase {
		return walPhase{Variant: variant, Phase: name, Events: events, Records: records, IndexEntries: index}
	}
	r := fakeRun(groupWAL, "WAL per transition", 1, 1)
	r.res.WAL = []walPhase{
		phase(variantKeyed, phaseInsert, 100, 400, 300), phase(variantKeyed, phaseClaim, 100, 500, 200),
		phase(variantKeyed, phaseRenew, 100, 200, 0), phase(variantKeyed, phaseHistory, 40, 200, 80),
		phase(variantKeyed, phaseDelete, 30, 30, 0), phase(variantKeyed, phaseRetry, 30, 120, 60),
		phase(variantMinimal, phaseInsert, 100, 300, 200), phase(variantMinimal, phaseClaim, 100, 400, 100),
		phase(variantMinimal, phaseRenew, 100, 300, 100), phase(variantMinimal, phaseHistory, 40, 120, 40),
		phase(variantMinimal, phaseDelete, 30, 30, 0), phase(variantMinimal, phaseRetry, 30, 120, 60),
	}
	history := targetNamed(t, "WAL records/event, insert + claim + completion with history", "minimal outbox, same row (UPDATE to SENT)")
	s := history.sample([]run{r}, 1)
	require.True(t, s.ok)
	require.InDelta(t, (4+5+5.0)/(3+4+3.0), s.v, 1e-9)
	_, _, met := history.verdict([]sample{s})
	require.True(t, met, "1.40× is within 1.5×")
	deleted := targetNamed(t, "WAL records/event, insert + claim + completion with DeleteSent", "minimal-delete, same row")
	require.InDelta(t, (4+5+1.0)/(3+4+1.0), deleted.sample([]run{r}, 1).v, 1e-9)
	renewal := targetNamed(t, "heartbeat renewal: index entries per event", "")
	s = renewal.sample([]run{r}, 1)
	require.Equal(t, sample{v: 0, ran: true, ok: true}, s)
	_, _, met = renewal.verdict([]sample{s})
	require.True(t, met)
	_, ok := recordsPerEvent(r.res.WAL, variantUnkeyed, []string{phaseInsert})
	require.False(t, ok, "a variant the run did not measure has no value")
}
