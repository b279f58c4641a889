// Command benchmarks measures pgoutbox side by side with the raw-SQL limit
// (raw SQL on pgoutbox's table, and the minimal hand-written outbox),
// River and Watermill on the local PostgreSQL. Each run creates and drops
// its own database and prints one JSON line. See docs/benchmarks.md.
//
//	go run ./benchmarks -case pgoutbox -mode dispatch -batch 100 -concurrency 100
//	go run ./benchmarks -case suite -rounds 3 -out docs/benchmarks.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := execute(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

// execute runs one case (or the suite) and prints its JSON lines.
func execute(ctx context.Context, o Options) error {
	if o.CPUProfile != "" {
		stop, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.Case == "suite" {
		return runSuite(ctx, o)
	}
	res, err := runCase(ctx, o)
	if err != nil {
		return err
	}
	return printJSON(os.Stdout, res)
}

// runCase runs one case once and returns its result.
func runCase(ctx context.Context, o Options) (Result, error) {
	fn, ok := cases[o.Case]
	if !ok {
		return Result{}, fmt.Errorf("unknown case %q (known: %s, suite)", o.Case, strings.Join(caseNames(), ", "))
	}
	res, err := fn(ctx, o)
	if err != nil {
		return Result{}, fmt.Errorf("%s/%s: %w", o.Case, o.Mode, err)
	}
	res.finish(o)
	return res, nil
}

// cases maps a -case name to the function that runs it.
var cases = map[string]func(context.Context, Options) (Result, error){
	"pgoutbox":  runPgoutbox,
	"raw-sql":   runRawSQL,
	"river":     runRiver,
	"watermill": runWatermill,
	"latency":   runLatency,
	"claim":     runClaim,
	"minimal":   runMinimal,
	"log":       runLog,
	"walcost":   runWALCost,
	"sustained": runSustained,
	"operators": runOperators,
	"relay":     runRelay,
}

func caseNames() []string {
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func printJSON(f *os.File, res Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, string(b))
	return err
}

// parseFlags reads the command line into Options.
func parseFlags(args []string) (Options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("benchmarks", flag.ContinueOnError)
	fs.StringVar(&o.Case, "case", "", "case: pgoutbox, raw-sql, minimal, log, river, watermill, latency, claim, walcost, sustained, operators, relay or suite")
	fs.StringVar(&o.Mode, "mode", "", "mode of the case (see docs/benchmarks.md); empty for its first")
	fs.StringVar(&o.URL, "url", o.URL, "admin database URL; each run creates and drops its own database")
	fs.IntVar(&o.N, "n", o.N, "events per run")
	fs.IntVar(&o.Writers, "writers", o.Writers, "concurrent writers (emit) or workers (raw-sql and minimal dispatch)")
	fs.IntVar(&o.Batch, "batch", o.Batch, "events per transaction (batch emit), per claim/fetch (dispatch), the relay's MaxBatch (relay throughput)")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "dispatcher Concurrency, River MaxWorkers")
	fs.IntVar(&o.Claimers, "claimers", 0, "dispatcher Claimers (0: the default)")
	fs.IntVar(&o.Payload, "payload", o.Payload, "payload bytes per event")
	fs.BoolVar(&o.Tuned, "tuned", o.Tuned, "river: short FetchCooldown/FetchPollInterval")
	fs.BoolVar(&o.Notify, "notify", o.Notify, "pgoutbox emit: in-tx pg_notify")
	fs.BoolVar(&o.NotifyEvery, "notify-every", o.NotifyEvery, "pgoutbox emit, latency: notify in every Emit (NotifyEveryEmit)")
	fs.IntVar(&o.Rate, "rate", o.Rate, "latency, sustained, relay latency and longtx: target commits per second")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "latency, sustained, relay latency: load duration")
	fs.DurationVar(&o.Retain, "retain", o.Retain, "sustained: the dispatcher's RetainSent")
	fs.DurationVar(&o.Sample, "sample", o.Sample, "sustained: time between size samples")
	fs.IntVar(&o.FillFactor, "fillfactor", 0, "walcost: the outbox table's fillfactor (0: the schema's)")
	fs.BoolVar(&o.Wakeup, "wakeup", o.Wakeup, "latency: WakeupRequired (true) or WakeupDisabled (false)")
	fs.DurationVar(&o.Poll, "poll", o.Poll, "dispatcher PollInterval")
	fs.IntVar(&o.Backlog, "backlog", o.Backlog, "claim: pending rows before measuring")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "suite: rounds")
	fs.BoolVar(&o.Short, "short", o.Short, "suite: every case tiny (a smoke run)")
	fs.StringVar(&o.Out, "out", o.Out, "suite: markdown report to write")
	fs.StringVar(&o.Only, "only", "", "suite: \"targets\" runs only what the targets (issue 25's, and issue 16's latency bounds) need (every spec in every round) and writes their report to -out")
	fs.IntVar(&o.Keys, "keys", 0, "dispatch: partition keys of the preloaded events, round robin (0: none)")
	fs.BoolVar(&o.Ordered, "ordered", false, "dispatch: Ordering PerKey")
	fs.BoolVar(&o.DeleteSent, "delete-sent", false, "pgoutbox dispatch: DeleteSent (a success deletes the row, no history)")
	fs.IntVar(&o.Types, "types", 0, "dispatch: event types of the preloaded events, round robin, one Handle per type (0: one type)")
	fs.StringVar(&o.Publisher, "publisher", "noop", "relay: destination (noop, kfake: kafkapub to an in-process kfake, nats: natspub to the local JetStream)")
	fs.DurationVar(&o.Hold, "hold", o.Hold, "relay longtx: how long the one transaction stays open")
	fs.BoolVar(&o.Ticked, "ticked", false, "relay throughput: a tick after every -batch events of the backlog (else one tick holds it all)")
	fs.BoolVar(&o.SQLTime, "sqltime", false, "relay throughput and the emit modes: time each statement (params.sql_ms: count and total ms, start to the end of its rows)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.Case == "" {
		return o, fmt.Errorf("-case is required (one of %s, suite)", strings.Join(caseNames(), ", "))
	}
	return o, nil
}
