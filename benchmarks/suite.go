package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// spec is one configuration of the suite: a label, the group it belongs to
// in the report, and its command-line flags.
type spec struct {
	label string
	group string
	args  []string
}

// run is one measured run of a spec.
type run struct {
	spec  spec
	round int
	res   Result
	err   error
}

// Groups of the report.
const (
	groupEmit     = "emit: one event + one business row per transaction, 4 writers"
	groupEmit1    = "emit: one event + one business row per transaction, 1 writer"
	groupBatch    = "batch emit: 1,000 events per transaction, 2 writers"
	groupDispatch = "dispatch: drain pre-inserted events, no-op handler"
	groupLatency  = "latency"
	groupBatchX   = "dispatch vs batch size"
	groupConcX    = "dispatch vs concurrency"
	groupBacklog  = "claim latency vs backlog"
	groupPayload  = "emit vs payload size"
	groupOrdered  = "dispatch vs partition keys, unordered and Ordering PerKey (B=100 C=100)"
	groupTypes    = "dispatch with handlers for many event types: events spread over the types, one Handle per type, B=100 C=100"
	groupWAL      = "WAL per transition"
	// The log relay's (issue 27) latency and long-transaction runs; its
	// drains are in groupDispatch, beside their references.
	groupRelayLatency = "relay: commit → publish latency, no-op publisher, default tick"
	groupRelayLongTx  = "relay: one transaction held open, the other events' rate"
)

// roundSpecs are run in every round; ratios come from them.
func roundSpecs(short bool) []spec {
	n, e, slow := sizes(short, 50_000), sizes(short, 20_000), sizes(short, 10_000)
	return []spec{
		{"pgoutbox Emit", groupEmit, args("pgoutbox", "emit", "-n", e, "-writers", "4")},
		{"raw INSERT", groupEmit, args("raw-sql", "insert", "-n", e, "-writers", "4")},
		{"minimal INSERT", groupEmit, args("minimal", "insert", "-n", e, "-writers", "4")},
		{"log Emit", groupEmit, args("log", "emit", "-n", e, "-writers", "4")},
		{"river InsertTx", groupEmit, args("river", "insert", "-n", e, "-writers", "4")},
		{"notify in every Emit (NotifyEveryEmit)", groupEmit, args("pgoutbox", "emit", "-n", e, "-writers", "4", "-notify-every")},
		{"pgoutbox Emit, 1 writer", groupEmit1, args("pgoutbox", "emit", "-n", e, "-writers", "1")},
		{"raw INSERT, 1 writer", groupEmit1, args("raw-sql", "insert", "-n", e, "-writers", "1")},
		{"minimal INSERT, 1 writer", groupEmit1, args("minimal", "insert", "-n", e, "-writers", "1")},
		{"log Emit, 1 writer", groupEmit1, args("log", "emit", "-n", e, "-writers", "1")},
		{"pgoutbox Emit ×1000", groupBatch, args("pgoutbox", "emit-batch", "-n", n, "-batch", "1000", "-writers", "2")},
		{"raw COPY ×1000", groupBatch, args("raw-sql", "copy", "-n", n, "-batch", "1000", "-writers", "2")},
		{"minimal COPY ×1000", groupBatch, args("minimal", "copy", "-n", n, "-batch", "1000", "-writers", "2")},
		{"minimal INSERT ×1000", groupBatch, args("minimal", "insert-multi", "-n", n, "-batch", "1000", "-writers", "2")},
		{"log Emit ×1000", groupBatch, args("log", "emit-batch", "-n", n, "-batch", "1000", "-writers", "2")},
		{"river InsertManyTx ×1000", groupBatch, args("river", "insert-many", "-n", n, "-batch", "1000", "-writers", "2")},
		{"pgoutbox B=100 C=100 (defaults)", groupDispatch, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100")},
		{"pgoutbox B=1000 C=1000", groupDispatch, args("pgoutbox", "dispatch", "-n", n, "-batch", "1000", "-concurrency", "1000")},
		{"pgoutbox DeleteSent B=100 C=100", groupDispatch, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100", "-delete-sent")},
		{"pgoutbox DeleteSent B=1000 C=1000", groupDispatch, args("pgoutbox", "dispatch", "-n", n, "-batch", "1000", "-concurrency", "1000", "-delete-sent")},
		{"raw-sql B=100 W=4", groupDispatch, args("raw-sql", "dispatch", "-n", n, "-batch", "100", "-writers", "4")},
		{"raw-sql B=1000 W=2", groupDispatch, args("raw-sql", "dispatch", "-n", n, "-batch", "1000", "-writers", "2")},
		{"minimal B=100 W=4", groupDispatch, args("minimal", "dispatch", "-n", n, "-batch", "100", "-writers", "4")},
		{"minimal B=1000 W=2", groupDispatch, args("minimal", "dispatch", "-n", n, "-batch", "1000", "-writers", "2")},
		{"minimal-delete B=100 W=4", groupDispatch, args("minimal", "dispatch-delete", "-n", n, "-batch", "100", "-writers", "4")},
		{"minimal-delete B=1000 W=2", groupDispatch, args("minimal", "dispatch-delete", "-n", n, "-batch", "1000", "-writers", "2")},
		{"river default, 100 workers", groupDispatch, args("river", "work", "-n", slow, "-concurrency", "100")},
		{"river tuned, 2000 workers", groupDispatch, args("river", "work", "-n", n, "-concurrency", "2000", "-tuned")},
		{"natspub → local NATS JetStream, B=100 C=100", groupDispatch, args("pgoutbox", "dispatch-nats", "-n", n, "-batch", "100", "-concurrency", "100")},
		{"amqppub → local RabbitMQ, B=100 C=100", groupDispatch, args("pgoutbox", "dispatch-rabbitmq", "-n", n, "-batch", "100", "-concurrency", "100")},
		{"kafkapub → in-process kfake, B=100 C=100", groupDispatch, args("pgoutbox", "dispatch-kafka", "-n", n, "-batch", "100", "-concurrency", "100")},
		{"natspub → local NATS JetStream, B=1000 C=1000", groupDispatch, args("pgoutbox", "dispatch-nats", "-n", n, "-batch", "1000", "-concurrency", "1000")},
		{"amqppub → local RabbitMQ, B=1000 C=1000", groupDispatch, args("pgoutbox", "dispatch-rabbitmq", "-n", n, "-batch", "1000", "-concurrency", "1000")},
		{"kafkapub → in-process kfake, B=1000 C=1000", groupDispatch, args("pgoutbox", "dispatch-kafka", "-n", n, "-batch", "1000", "-concurrency", "1000")},
		{"relay → no-op, MaxBatch 1000", groupDispatch, args("relay", "throughput", "-n", n, "-batch", "1000", "-publisher", "noop")},
		{"relay (backlog ticked every 1000) → no-op, MaxBatch 1000", groupDispatch,
			args("relay", "throughput", "-n", n, "-batch", "1000", "-publisher", "noop", "-ticked")},
		{"relay → in-process kfake, MaxBatch 5000 (default)", groupDispatch, args("relay", "throughput", "-n", n, "-batch", "5000", "-publisher", "kfake")},
		{"relay → local NATS JetStream, MaxBatch 5000 (default)", groupDispatch, args("relay", "throughput", "-n", n, "-batch", "5000", "-publisher", "nats")},
		{"watermill forwarder B=100", groupDispatch, args("watermill", "forward", "-n", n, "-batch", "100")},
		{"watermill forwarder B=1000", groupDispatch, args("watermill", "forward", "-n", n, "-batch", "1000")},
		{"50 types", groupTypes, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100", "-types", "50")},
		{"200 types", groupTypes, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100", "-types", "200")},
	}
}

// curveSpecs run once, after the rounds: latency and the scaling curves.
func curveSpecs(short bool) []spec {
	var out []spec
	dur := "10s"
	if short {
		dur = "1s"
	}
	for _, rate := range []string{"100", "1000", "5000"} {
		out = append(out,
			spec{"wake-ups on, poll 1s, " + rate + "/s", groupLatency, args("latency", "", "-rate", rate, "-duration", dur, "-wakeup=true", "-poll", "1s")},
			spec{"wake-ups on, notify in every Emit, poll 1s, " + rate + "/s", groupLatency,
				args("latency", "", "-rate", rate, "-duration", dur, "-wakeup=true", "-poll", "1s", "-notify-every")},
			spec{"wake-ups off, poll 1s, " + rate + "/s", groupLatency, args("latency", "", "-rate", rate, "-duration", dur, "-wakeup=false", "-poll", "1s")},
			spec{"wake-ups off, poll 100ms, " + rate + "/s", groupLatency, args("latency", "", "-rate", rate, "-duration", dur, "-wakeup=false", "-poll", "100ms")})
	}
	hold := "60s"
	if short {
		hold = "1s"
	}
	out = append(out,
		spec{"relay, default tick, 1000/s", groupRelayLatency, args("relay", "latency", "-rate", "1000", "-duration", dur)},
		spec{"relay, one transaction open " + hold + ", 1000/s", groupRelayLongTx, args("relay", "longtx", "-rate", "1000", "-hold", hold)})
	n := sizes(short, 10_000)
	for _, b := range []string{"1", "10", "100", "1000"} {
		out = append(out, spec{"B=" + b + " C=1000", groupBatchX, args("pgoutbox", "dispatch", "-n", n, "-batch", b, "-concurrency", "1000")})
	}
	for _, c := range []string{"1", "10", "100", "1000"} {
		out = append(out, spec{"C=" + c + " B=100", groupConcX, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", c)})
	}
	for _, b := range []string{"10000", sizes(short, 1_000_000)} {
		out = append(out, spec{"backlog " + b, groupBacklog, args("claim", "", "-backlog", b, "-batch", "100")})
	}
	for _, k := range []string{"1", "100", "10000"} {
		out = append(out,
			spec{k + " keys, unordered", groupOrdered, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100", "-keys", k)},
			spec{k + " keys, PerKey", groupOrdered, args("pgoutbox", "dispatch", "-n", n, "-batch", "100", "-concurrency", "100", "-keys", k, "-ordered")})
	}
	walBatch := "100"
	if short {
		walBatch = "20" // 200 events: ten batches, so every completion kind has some
	}
	out = append(out, spec{"WAL per transition", groupWAL, args("walcost", "", "-n", sizes(short, 3000), "-batch", walBatch)})
	for _, p := range []struct{ size, n string }{{"100", sizes(short, 2000)}, {"10240", sizes(short, 2000)}, {"1048576", sizes(short, 200)}} {
		out = append(out, spec{"payload " + p.size + " B", groupPayload, args("pgoutbox", "emit", "-n", p.n, "-writers", "4", "-payload", p.size)})
	}
	return out
}

func args(c, mode string, rest ...string) []string {
	return append([]string{"-case", c, "-mode", mode}, rest...)
}

// sizes is n, or at most 200 in short mode.
func sizes(short bool, n int) string {
	if short {
		return strconv.Itoa(min(n, 200))
	}
	return strconv.Itoa(n)
}

// targetSpecs are the specs the targets use, round and curve specs alike:
// `-only targets` runs them all in every round.
func targetSpecs(short bool) []spec {
	var out []spec
	for _, s := range append(roundSpecs(short), curveSpecs(short)...) {
		if slices.ContainsFunc(targets, func(t target) bool { return t.uses(s) }) {
			out = append(out, s)
		}
	}
	return out
}

// runSuite runs the round specs o.Rounds times (each round in a rotated
// order, so no configuration always runs first), then the curves once; it
// prints every JSON line and writes the report. With -only targets it
// runs targetSpecs in every round and no curves.
func runSuite(ctx context.Context, o Options) error {
	if o.Short {
		o.Rounds = 1
	}
	specs, curves, err := suiteSpecs(o)
	if err != nil {
		return err
	}
	started := time.Now()
	env := describeEnv(ctx, o.URL)
	var runs []run
	for r := range o.Rounds {
		for i := range specs {
			s := specs[(i+r*len(specs)/max(o.Rounds, 1))%len(specs)]
			runs = append(runs, runOne(ctx, o, s, r+1))
		}
	}
	for _, s := range curves {
		runs = append(runs, runOne(ctx, o, s, 1))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	env.elapsed = time.Since(started)
	return writeOutputs(o, env, runs)
}

// suiteSpecs are the round and the curve specs of o.Only.
func suiteSpecs(o Options) (rounds, curves []spec, err error) {
	switch o.Only {
	case "":
		return roundSpecs(o.Short), curveSpecs(o.Short), nil
	case "targets":
		if o.Out == defaultOptions().Out {
			return nil, nil, fmt.Errorf("-only targets writes a partial report: give -out another path than %s", o.Out)
		}
		return targetSpecs(o.Short), nil, nil
	}
	return nil, nil, fmt.Errorf("unknown -only %q (targets)", o.Only)
}

// runBudget bounds one run of the suite (runShortBudget with -short), so
// that a run that stalls is counted failed instead of hanging the sitting:
// Watermill's forwarder, for one, reads only rows whose transaction id is
// below the snapshot's xmin, so any long transaction anywhere on the
// server (another engineer's test) holds it up for as long as it lasts.
// The slowest run at full N takes a few minutes on a loaded 2-core machine.
var (
	runBudget      = 20 * time.Minute
	runShortBudget = 2 * time.Minute
)

// runOne runs one spec with the suite's URL within its budget and prints
// its JSON line.
func runOne(ctx context.Context, o Options, s spec, round int) run {
	opts, err := parseFlags(append(s.args, "-url", o.URL))
	if err != nil {
		return run{spec: s, round: round, err: err}
	}
	budget := runBudget
	if o.Short {
		budget = runShortBudget
	}
	runCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	res, err := runCase(runCtx, opts)
	if err != nil && ctx.Err() == nil && runCtx.Err() != nil {
		err = fmt.Errorf("no result within the run's budget of %s: %w", budget, err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "round %d %s: %v\n", round, s.label, err)
	} else {
		_ = printJSON(os.Stdout, res)
	}
	return run{spec: s, round: round, res: res, err: err}
}

// writeOutputs writes the JSON lines, the plot and the markdown report
// next to o.Out (nothing when o.Out is empty); with -only targets, the
// targets report to o.Out and its JSON lines beside it (.jsonl).
func writeOutputs(o Options, env machine, runs []run) error {
	if o.Out == "" {
		return failures(runs)
	}
	if o.Only == "targets" {
		return writeTargets(o, env, runs)
	}
	root := filepath.Join(filepath.Dir(o.Out), "..")
	dir := filepath.Join(root, "benchmarks", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSONL(filepath.Join(dir, "latest.jsonl"), runs); err != nil {
		return err
	}
	if err := plotCurves(filepath.Join(dir, "scaling.png"), runs); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.Out, []byte(report(env, runs, o.Rounds, filepath.Join(root, analysisFile))), 0o644); err != nil {
		return err
	}
	return failures(runs)
}

// writeTargets writes the -only targets report to o.Out and its JSON lines
// to o.Out with the extension .jsonl.
func writeTargets(o Options, env machine, runs []run) error {
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return err
	}
	if err := writeJSONL(strings.TrimSuffix(o.Out, filepath.Ext(o.Out))+".jsonl", runs); err != nil {
		return err
	}
	if err := os.WriteFile(o.Out, []byte(targetsReport(env, runs, o.Rounds)), 0o644); err != nil {
		return err
	}
	return failures(runs)
}

func writeJSONL(path string, runs []run) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range runs {
		if r.err == nil {
			if err := enc.Encode(map[string]any{"label": r.spec.label, "round": r.round, "result": r.res}); err != nil {
				_ = f.Close()
				return err
			}
		}
	}
	return f.Close()
}

// failures reports how many runs failed, as an error.
func failures(runs []run) error {
	n := 0
	for _, r := range runs {
		if r.err != nil || !r.res.Verified {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d runs failed or did not verify", n, len(runs))
	}
	return nil
}
