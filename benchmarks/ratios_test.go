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
	tg := targetNamed(t, "commit → handler start p50, 100/s, wake-ups on", "")
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
	for _, want := range []string{"pgoutbox Emit", "minimal INSERT, 1 writer", "raw COPY ×1000", "minimal B=100 W=4", "minimal B=1000 W=2",
		"river default, 100 workers", "watermill forwarder B=1000", "wake-ups on, poll 1s, 5000/s"} {
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
	require.Contains(t, out, "| single-event emit, 1 writer | minimal INSERT | ≥ 0.85× | failed | – | **–** | **missed** |")
	require.Contains(t, out, "| single-event emit, 1 writer | raw INSERT | reported | failed | – | **–** | – |")
	require.Contains(t, out, "| claims per event, 5,000/s, wake-ups on | – | ≤ 0.044 |")
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
