package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// latencyWriters is the generator's pool of committing goroutines: enough
// that a few-millisecond commit does not cap 5,000/s.
const latencyWriters = 32

// latencyWarmup is how long the generator runs before the events it
// measures: the first second of a run on fresh connections (each backend
// building its caches and statements) held events up by tens of
// milliseconds, which is start-up, not the steady state the targets are
// about. Its events are dispatched and verified but not counted.
const latencyWarmup = time.Second

// latencyRun holds the clocks of one latency run, indexed by the event's
// sequence number (its "bench-seq" header).
type latencyRun struct {
	committed []atomic.Int64 // unix ns when Commit returned
	started   []atomic.Int64 // unix ns when the handler started
	sent      atomic.Int64   // transactions committed
}

// runLatency commits single-event transactions at Rate per second for
// Duration (open loop: a generator that falls behind is reported, not
// hidden) while a dispatcher handles them, and reports commit → handler
// start latency. -wakeup picks WakeupRequired with in-tx notify (at most
// one per emitter.DefaultNotifyInterval, or in every Emit with
// -notify-every), or WakeupDisabled without it; -poll sets PollInterval.
func runLatency(ctx context.Context, o Options) (Result, error) {
	warm := int(float64(o.Rate) * latencyWarmup.Seconds())
	total := warm + int(float64(o.Rate)*o.Duration.Seconds())
	db, err := openWarmed(ctx, o.URL, latencyWriters+8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	lr := &latencyRun{committed: make([]atomic.Int64, total), started: make([]atomic.Int64, total)}
	d, err := latencyDispatcher(db, o, lr)
	if err != nil {
		return Result{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(runCtx) }()
	if err := waitRunning(ctx, d, o.Wakeup); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := lr.generate(ctx, db, o, total); err != nil {
		return Result{}, err
	}
	held := time.Since(start)
	if err := waitSent(ctx, d, lr.sent.Load(), runErr); err != nil {
		return Result{}, err
	}
	if err := stopWithin(ctx, d.Stop); err != nil {
		return Result{}, err
	}
	return lr.result(ctx, db, o, warm, total, held, d.Stats())
}

// latencyDispatcher builds the dispatcher whose handler stamps start times.
func latencyDispatcher(db *benchDB, o Options, lr *latencyRun) (*dispatcher.Dispatcher, error) {
	mode := dispatcher.WakeupDisabled
	if o.Wakeup {
		mode = dispatcher.WakeupRequired
	}
	d, err := dispatcher.New(db.pool, dispatcher.Config{PollInterval: o.Poll, Wakeup: mode, BatchSize: o.Batch, Concurrency: o.Concurrency, Logger: quietLogger})
	if err != nil {
		return nil, err
	}
	err = d.Handle(eventType, func(_ context.Context, e outbox.Event) error {
		now := time.Now().UnixNano()
		i, err := strconv.Atoi(e.Headers["bench-seq"])
		if err != nil || i < 0 || i >= len(lr.started) {
			return outbox.Permanent(fmt.Errorf("bad bench-seq %q", e.Headers["bench-seq"]))
		}
		lr.started[i].CompareAndSwap(0, now)
		return nil
	})
	return d, err
}

// waitRunning waits until the dispatcher's wake-ups are active (when
// required) or its first poll cycle ran, so that start-up does not count.
func waitRunning(ctx context.Context, d *dispatcher.Dispatcher, wakeup bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s := d.Stats()
		if (wakeup && s.WakeupsActive) || (!wakeup && s.ClaimCycles > 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("dispatcher not running after 30s")
}

// generate schedules transaction i at start + i/Rate and commits it from
// one of latencyWriters goroutines.
func (lr *latencyRun) generate(ctx context.Context, db *benchDB, o Options, total int) error {
	em, err := emitter.New(emitter.Config{DisableNotify: !o.Wakeup, NotifyEveryEmit: o.NotifyEvery})
	if err != nil {
		return err
	}
	jobs := make(chan int, latencyWriters)
	g, gctx := errgroup.WithContext(ctx)
	for range latencyWriters {
		g.Go(func() error { return lr.write(gctx, db, em, jobs, o.Payload) })
	}
	g.Go(func() error {
		defer close(jobs)
		return pace(gctx, o.Rate, total, jobs)
	})
	return g.Wait()
}

// pace sends 0..total-1 on jobs at rate per second; a full channel (all
// writers busy) delays it, so the rate held is measured, not assumed.
func pace(ctx context.Context, rate, total int, jobs chan<- int) error {
	start := time.Now()
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// write commits one single-event transaction per job.
func (lr *latencyRun) write(ctx context.Context, db *benchDB, em *emitter.Emitter, jobs <-chan int, size int) error {
	body := payload(size)
	for i := range jobs {
		ev := outbox.Event{Type: eventType, Payload: body, Headers: map[string]string{"bench-seq": strconv.Itoa(i)}}
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			_, err := em.Emit(ctx, tx, ev)
			return err
		})
		if err != nil {
			return err
		}
		lr.committed[i].Store(time.Now().UnixNano())
		lr.sent.Add(1)
	}
	return nil
}

// waitSent waits (at most a minute) until the dispatcher sent n events.
func waitSent(ctx context.Context, d *dispatcher.Dispatcher, n int64, runErr <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for d.Stats().Sent < uint64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("sent %d of %d after a minute", d.Stats().Sent, n)
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("dispatcher stopped early: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// result computes the latencies (a handler that started before its
// writer saw Commit return counts as 0) and verifies every event is SENT.
func (lr *latencyRun) result(ctx context.Context, db *benchDB, o Options, warm, total int, held time.Duration, s dispatcher.Stats) (Result, error) {
	samples := make([]int64, 0, total-warm)
	early := 0
	for i := range total {
		c, st := lr.committed[i].Load(), lr.started[i].Load()
		if c == 0 || st == 0 {
			return Result{}, fmt.Errorf("event %d: committed %d, started %d", i, c, st)
		}
		if i < warm {
			continue
		}
		if st < c {
			early++
		}
		samples = append(samples, max(0, st-c))
	}
	res := throughput("commit-to-handler", total, held)
	res.setLatency(samples)
	res.Params = map[string]any{"rate": o.Rate, "duration_s": o.Duration.Seconds(), "wakeup": o.Wakeup, "notify_every": o.NotifyEvery,
		"poll_ms": o.Poll.Milliseconds(), "writers": latencyWriters, "claim_cycles": s.ClaimCycles, "wakeups": s.Wakeups,
		"claims_per_event": round(float64(s.ClaimCycles)/float64(total), 4)}
	res.Note = fmt.Sprintf("events_per_s is the commit rate held (target %d/s); %d handlers started before their writer saw Commit return (counted as 0)", o.Rate, early)
	return res.verify(ctx, db, total, sentSQL)
}
