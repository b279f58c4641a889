package main

import (
	"fmt"
	"slices"
	"strings"
)

// target is one ratio issue 6 asks for: best of ours over best of theirs,
// within the same round.
type target struct {
	name       string
	group      string
	ours       []string // label prefixes
	theirs     []string
	min        float64
	oursLabel  string
	theirLabel string
}

var targets = []target{
	{"dispatch vs best raw-sql", groupDispatch, []string{"pgoutbox"}, []string{"raw-sql"}, 0.8, "best pgoutbox", "best raw-sql"},
	{"dispatch vs best of River/Watermill", groupDispatch, []string{"pgoutbox"}, []string{"river", "watermill"}, 1.5, "best pgoutbox", "best River/Watermill"},
	{"single-event emit vs raw INSERT", groupEmit, []string{"pgoutbox"}, []string{"raw INSERT"}, 0.9, "pgoutbox Emit", "raw INSERT"},
	{"1,000-event batch emit vs raw COPY", groupBatch, []string{"pgoutbox"}, []string{"raw COPY"}, 0.8, "pgoutbox Emit ×1000", "raw COPY"},
}

// best is the highest verified events/s of a round among labels of group
// starting with one of prefixes.
func best(runs []run, group string, prefixes []string, round int) float64 {
	v := 0.0
	for _, r := range runs {
		if r.spec.group != group || r.round != round || r.err != nil || !r.res.Verified {
			continue
		}
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(r.spec.label, p) }) {
			v = max(v, r.res.EventsPerSec)
		}
	}
	return v
}

// ratios returns each round's ratio of t (0 where a side is missing).
func (t target) ratios(runs []run, rounds int) []float64 {
	out := make([]float64, rounds)
	for r := range rounds {
		ours, theirs := best(runs, t.group, t.ours, r+1), best(runs, t.group, t.theirs, r+1)
		if ours > 0 && theirs > 0 {
			out[r] = ours / theirs
		}
	}
	return out
}

func writeRatios(b *strings.Builder, runs []run, rounds int) {
	b.WriteString("## Targets (issue 6): ratios within each round\n\n| target | required |")
	for r := 1; r <= rounds; r++ {
		fmt.Fprintf(b, " round %d |", r)
	}
	b.WriteString(" median | met? |\n| --- | ---: |" + strings.Repeat(" ---: |", rounds) + " ---: | --- |\n")
	for _, t := range targets {
		rs := t.ratios(runs, rounds)
		fmt.Fprintf(b, "| %s (%s ÷ %s) | ≥ %.1f× |", t.name, t.oursLabel, t.theirLabel, t.min)
		for _, v := range rs {
			fmt.Fprintf(b, " %.2f× |", v)
		}
		m := medianOf(rs)
		met := "**missed**"
		if m >= t.min {
			met = "met"
		}
		fmt.Fprintf(b, " **%.2f×** | %s |\n", m, met)
	}
	b.WriteString("\n")
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
