package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// sustainedSample is the outbox's size at one moment of a sustained run.
type sustainedSample struct {
	At         float64 `json:"at_s"`      // seconds since the load began
	Committed  int64   `json:"committed"` // events committed so far
	Sent       uint64  `json:"sent"`      // events the dispatcher recorded SENT so far
	Retired    uint64  `json:"retired"`   // history rows retention retired so far
	Backlog    int64   `json:"backlog"`   // rows in the outbox table
	HotHeap    int64   `json:"hot_heap"`  // the outbox table, heap bytes (with TOAST and maps)
	HotIndex   int64   `json:"hot_index"` // its indexes, bytes
	SentHeap   int64   `json:"sent_heap"` // the SENT history's partitions, heap bytes
	SentIndex  int64   `json:"sent_index"`
	Partitions int64   `json:"partitions"`  // the history's partitions, default included
	SentRows   int64   `json:"sent_rows"`   // the history's rows (planner estimate)
	DeadTuples int64   `json:"dead_tuples"` // the outbox table's n_dead_tup
	Vacuums    int64   `json:"vacuums"`     // its vacuums and autovacuums so far
	XminAge    int64   `json:"xmin_age"`    // the age of the oldest snapshot on the server, in transactions
}

// sustainedSizeSQL reads the sizes of the outbox table, its indexes, and
// the SENT history's partitions and their indexes.
const sustainedSizeSQL = `
SELECT (SELECT count(*) FROM outbox_events),
	pg_table_size('outbox_events'), pg_indexes_size('outbox_events'),
	coalesce(sum(pg_table_size(p.relid)), 0)::bigint, coalesce(sum(pg_indexes_size(p.relid)), 0)::bigint,
	count(*), coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples > 0), 0)::bigint,
	(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass),
	(SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass),
	(SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity)
FROM pg_partition_tree('outbox_events_sent') AS p JOIN pg_class AS c ON c.oid = p.relid
WHERE p.isleaf`

// runSustained commits single-event transactions at Rate per second for
// Duration (the latency case's open-loop generator) while a dispatcher at
// its defaults, with the SENT history on and RetainSent of Retain (its
// partitions then span a quarter of it), delivers them and retires the
// history. Every Sample it records the sizes of the outbox table, the
// history and their indexes, and it reports whether they stopped growing
// after the first retention cycle (RetainSent plus one partition span).
func runSustained(ctx context.Context, o Options) (Result, error) {
	db, err := openWarmed(ctx, o.URL, latencyWriters+8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	d, err := dispatcher.New(db.pool, dispatcher.Config{RetainSent: o.Retain, Logger: quietLogger})
	if err != nil {
		return Result{}, err
	}
	if err := d.Handle(eventType, func(context.Context, outbox.Event) error { return nil }); err != nil {
		return Result{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(runCtx) }()
	if err := waitRunning(ctx, d, true); err != nil {
		return Result{}, err
	}
	var committed atomic.Int64
	total := int(float64(o.Rate) * o.Duration.Seconds())
	start := time.Now()
	samples, err := sampleWhile(ctx, db, d, o.Sample, start, &committed, func(ctx context.Context) error {
		return generateSustained(ctx, db, o, total, &committed)
	})
	if err != nil {
		return Result{}, err
	}
	held := time.Since(start)
	if err := waitSent(ctx, d, committed.Load(), runErr); err != nil {
		return Result{}, err
	}
	if err := stopWithin(ctx, d.Stop); err != nil {
		return Result{}, err
	}
	var autovacuum string
	if err := db.pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		return Result{}, err
	}
	res := throughput("history+retention", total, held)
	res.Params = map[string]any{"rate": o.Rate, "duration_s": o.Duration.Seconds(), "retain_s": o.Retain.Seconds(),
		"writers": latencyWriters, "samples": samples, "autovacuum": autovacuum}
	res.Note = sustainedVerdict(samples, o)
	if autovacuum != "on" {
		res.Note += "; the server's autovacuum is off: nothing vacuums the outbox table, whose heap grows with every event"
	}
	fmt.Println(sustainedTable(samples))
	res.Verified = committed.Load() == int64(total)
	return res, nil
}

// generateSustained paces total single-event transactions at o.Rate.
func generateSustained(ctx context.Context, db *benchDB, o Options, total int, committed *atomic.Int64) error {
	em, err := emitter.New(emitter.Config{})
	if err != nil {
		return err
	}
	body := payload(o.Payload)
	jobs := make(chan int, latencyWriters)
	g, gctx := errgroup.WithContext(ctx)
	for range latencyWriters {
		g.Go(func() error {
			for range jobs {
				err := pgx.BeginFunc(gctx, db.pool, func(tx pgx.Tx) error {
					_, err := em.Emit(gctx, tx, outbox.Event{Type: eventType, Payload: body})
					return err
				})
				if err != nil {
					return err
				}
				committed.Add(1)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(jobs)
		return pace(gctx, o.Rate, total, jobs)
	})
	return g.Wait()
}

// sampleWhile runs load and takes a sample every interval until it
// returns, and one more after.
func sampleWhile(ctx context.Context, db *benchDB, d *dispatcher.Dispatcher, interval time.Duration, start time.Time,
	committed *atomic.Int64, load func(context.Context) error) ([]sustainedSample, error) {
	done := make(chan error, 1)
	go func() { done <- load(ctx) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var out []sustainedSample
	for {
		select {
		case err := <-done:
			if err != nil {
				return out, err
			}
			s, err := takeSample(ctx, db, d, start, committed)
			return append(out, s), err
		case <-tick.C:
			s, err := takeSample(ctx, db, d, start, committed)
			if err != nil {
				return out, err
			}
			out = append(out, s)
		}
	}
}

// takeSample reads the sizes and the dispatcher's counters.
func takeSample(ctx context.Context, db *benchDB, d *dispatcher.Dispatcher, start time.Time, committed *atomic.Int64) (sustainedSample, error) {
	st := d.Stats()
	s := sustainedSample{At: round(time.Since(start).Seconds(), 0), Committed: committed.Load(), Sent: st.Sent, Retired: st.RetentionSent}
	err := db.pool.QueryRow(ctx, sustainedSizeSQL).Scan(&s.Backlog, &s.HotHeap, &s.HotIndex, &s.SentHeap, &s.SentIndex, &s.Partitions, &s.SentRows,
		&s.DeadTuples, &s.Vacuums, &s.XminAge)
	return s, err
}

// sustainedVerdict says whether the sizes stopped growing after the
// first retention cycle (RetainSent, a span, a retention interval): the
// growth of the total from the first sample after it to the last, and
// the largest total.
func sustainedVerdict(samples []sustainedSample, o Options) string {
	settled := (o.Retain + o.Retain/4 + time.Minute).Seconds()
	var first, peak, last int64
	n := 0
	for _, s := range samples {
		if s.At < settled {
			continue
		}
		last = s.HotHeap + s.HotIndex + s.SentHeap + s.SentIndex
		if n == 0 {
			first = last
		}
		n++
		peak = max(peak, last)
	}
	if n < 2 {
		return fmt.Sprintf("too short: the first retention cycle ends at %.0fs", settled)
	}
	return fmt.Sprintf("after the first retention cycle (%.0fs): %d samples, total size %s then %s at the end (%+.1f%%), at most %s",
		settled, n, mib(first), mib(last), 100*float64(last-first)/float64(first), mib(peak))
}

// sustainedTable renders the samples as a markdown table.
func sustainedTable(samples []sustainedSample) string {
	var b strings.Builder
	b.WriteString("| s | committed | sent | retired | backlog | outbox heap | outbox indexes | history heap | history indexes | partitions | history rows | dead tuples | vacuums | oldest xmin age |\n" +
		"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %.0f | %d | %d | %d | %d | %s | %s | %s | %s | %d | %d | %d | %d | %d |\n", s.At, s.Committed, s.Sent, s.Retired,
			s.Backlog, mib(s.HotHeap), mib(s.HotIndex), mib(s.SentHeap), mib(s.SentIndex), s.Partitions, s.SentRows,
			s.DeadTuples, s.Vacuums, s.XminAge)
	}
	return b.String()
}

// mib formats bytes as MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
