package main

import (
	"fmt"
	"strings"
)

func writeLatency(b *strings.Builder, runs []run) {
	b.WriteString("## Latency: commit → handler start (issue 5)\n\n" +
		"A generator commits single-event transactions (emitter, in-tx notify when wake-ups are on) at the target rate " +
		"from 32 goroutines on a warmed connection pool for 1 s of warm-up, not counted, and then 10 s " +
		"(open loop: when every writer is busy the generator falls behind, and the rate held says so). " +
		"The handler stamps its start; the writer stamps the return of Commit (same process, same clock). " +
		"Wake-ups on: `WakeupRequired`; off: `WakeupDisabled` and the emitter's notify off.\n\n" +
		"| configuration | flags | round | target/s | held/s | p50 ms | p95 ms | p99 ms | claim cycles | claims/event | load | verified |\n" +
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range runs {
		if r.spec.group != groupLatency {
			continue
		}
		if r.err != nil || !r.res.Verified {
			fmt.Fprintf(b, "| %s | `%s` | %d | failed: %v |||||||| no |\n", r.spec.label, flagsOf(r.spec), r.round, r.err)
			continue
		}
		p := r.res.Params
		fmt.Fprintf(b, "| %s | `%s` | %d | %v | %s | %s | %s | %s | %v | %v | %.1f | yes |\n", r.spec.label, flagsOf(r.spec), r.round, p["rate"],
			num(r.res.EventsPerSec), ms(r.res.P50MS), ms(r.res.P95MS), ms(r.res.P99MS), p["claim_cycles"], p["claims_per_event"], r.res.Load1)
	}
	b.WriteString("\n")
}

func ms(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f", *v)
}

func writeCurves(b *strings.Builder, runs []run) {
	b.WriteString("## Scaling curves\n\n![dispatch vs batch size and concurrency, claim latency vs backlog, emit vs payload](../benchmarks/results/scaling.png)\n\n" +
		"Raw JSON lines of the whole sitting: [benchmarks/results/latest.jsonl](../benchmarks/results/latest.jsonl).\n\n")
	for _, g := range []string{groupBatchX, groupConcX, groupBacklog, groupPayload, groupOrdered, groupRelayLatency, groupRelayLongTx} {
		fmt.Fprintf(b, "### %s\n\n| configuration | flags | N | events/s | p50 ms | p95 ms | p99 ms | load | verified |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n", g)
		for _, r := range runs {
			if r.spec.group != g {
				continue
			}
			if r.err != nil || !r.res.Verified {
				fmt.Fprintf(b, "| %s | `%s` | failed: %v |||||| no |\n", r.spec.label, flagsOf(r.spec), r.err)
				continue
			}
			fmt.Fprintf(b, "| %s | `%s` | %s | %s | %s | %s | %s | %.1f | yes |\n", r.spec.label, flagsOf(r.spec), num(float64(r.res.N)),
				num(r.res.EventsPerSec), ms(r.res.P50MS), ms(r.res.P95MS), ms(r.res.P99MS), r.res.Load1)
		}
		b.WriteString("\n")
	}
}
