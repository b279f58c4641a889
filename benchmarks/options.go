package main

import (
	"cmp"
	"os"
	"time"
)

// Options are the parameters of one run; the flags fill them.
type Options struct {
	// Case and Mode pick what runs (-case, -mode; an empty Mode is the
	// case's first).
	Case, Mode string
	// URL is the admin database each run creates its own database from.
	URL string
	// N is the number of events of a run.
	N int
	// Writers is the number of concurrent writers (emit) or workers
	// (raw-sql and minimal dispatch).
	Writers int
	// Batch is events per transaction (batch emit) or per claim/fetch.
	Batch int
	// Concurrency is the dispatcher's Concurrency and River's MaxWorkers.
	Concurrency int
	// Claimers is the dispatcher's Claimers (0: its default).
	Claimers int
	// Payload is the payload size of each event in bytes.
	Payload int
	// Tuned gives River a 2ms FetchCooldown and 20ms FetchPollInterval.
	Tuned bool
	// Notify turns the emitter's in-transaction pg_notify on.
	Notify bool
	// NotifyEvery makes every Emit notify (NotifyEveryEmit) instead of
	// at most one per emitter.DefaultNotifyInterval.
	NotifyEvery bool
	// Rate is the latency case's target commits per second.
	Rate int
	// Duration is how long the latency and sustained cases generate load.
	Duration time.Duration
	// Retain is the sustained case's RetainSent.
	Retain time.Duration
	// Sample is how often the sustained case records the sizes.
	Sample time.Duration
	// FillFactor, when not 0, is the outbox table's fillfactor in the
	// walcost case (the schema's own, 80, when 0).
	FillFactor int
	// Wakeup picks WakeupRequired (true) or WakeupDisabled (false).
	Wakeup bool
	// Poll is the dispatcher's PollInterval.
	Poll time.Duration
	// Backlog is the claim case's number of pending rows.
	Backlog int
	// Rounds is the suite's number of rounds.
	Rounds int
	// Short makes the suite run every case tiny.
	Short bool
	// Out is the suite's markdown report ("" for none).
	Out string
	// Only, when "targets", makes the suite run only the specs the
	// targets use, every one in every round, and write only their report.
	Only string
	// CPUProfile, when set, is where the run's CPU profile goes.
	CPUProfile string
	// Keys, when not 0, gives the preloaded events of the dispatch modes
	// that many partition keys, round robin (event i has key i mod Keys).
	Keys int
	// Ordered runs the dispatcher with Ordering PerKey.
	Ordered bool
	// DeleteSent runs the dispatcher with DeleteSent: a success deletes
	// the row instead of keeping it as history.
	DeleteSent bool
	// Types, when above 1, spreads the preloaded events of the dispatch
	// modes over that many event types (event i has type i mod Types) and
	// registers a handler per type; 0 or 1 is the one type bench.event.
	Types int
	// Publisher is the relay case's destination: noop, kfake or nats.
	Publisher string
	// Hold is how long the relay's longtx mode holds its transaction open.
	Hold time.Duration
	// Ticked makes the relay's throughput backlog a tick every Batch
	// events instead of one tick for the whole of it.
	Ticked bool
	// SQLTime times each statement of a relay throughput run or of an
	// emit mode (pgoutbox, minimal, log, raw-sql): count and total
	// milliseconds per statement, in the result's params.
	SQLTime bool
}

// defaultURL is the admin database: DATABASE_URL, else the test database
// `make test` uses, else the local PostgreSQL.
func defaultURL() string {
	return cmp.Or(os.Getenv("DATABASE_URL"), os.Getenv("PGOUTBOX_TEST_DATABASE_URL"),
		"postgres://postgres@127.0.0.1:5432/postgres")
}

func defaultOptions() Options {
	return Options{
		URL: defaultURL(), N: 50_000, Writers: 4, Batch: 100, Concurrency: 100,
		Payload: 100, Notify: true, Rate: 1000, Duration: 10 * time.Second,
		Wakeup: true, Poll: time.Second, Retain: 4 * time.Minute, Sample: time.Minute, Backlog: 10_000, Rounds: 3, Hold: time.Minute,
		Out: "docs/benchmarks.md",
	}
}
