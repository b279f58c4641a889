package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const eventType = "bench.event"

// runPgoutbox runs the pgoutbox modes: emit (one event and one business row
// per transaction, W writers), emit-batch (Batch events per transaction)
// and dispatch (drain N pre-inserted events with a no-op handler); and
// dispatch-nats / dispatch-kafka / dispatch-rabbitmq (the same drain
// through natspub to the local NATS, kafkapub to an in-process kfake
// broker, or amqppub to the local RabbitMQ).
func runPgoutbox(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{{"emit", pgoutboxEmit}, {"emit-batch", pgoutboxEmitBatch}, {"dispatch", pgoutboxDispatch},
		{"dispatch-nats", dispatchNATS}, {"dispatch-kafka", dispatchKafka}, {"dispatch-rabbitmq", dispatchRabbitMQ}})
}

func pgoutboxEmit(ctx context.Context, o Options) (Result, error) {
	em, err := emitter.New(emitter.Config{DisableNotify: !o.Notify, NotifyEveryEmit: o.NotifyEvery,
		MaxPayloadBytes: max(o.Payload, emitter.DefaultMaxPayloadBytes)})
	if err != nil {
		return Result{}, err
	}
	body := payload(o.Payload)
	return emitRun(ctx, o, "emit", func(ctx context.Context, tx pgx.Tx, _ int) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
			return err
		}
		_, err := em.Emit(ctx, tx, outbox.Event{Type: eventType, AggregateType: "order", Payload: body})
		return err
	}, 1)
}

func pgoutboxEmitBatch(ctx context.Context, o Options) (Result, error) {
	em, err := emitter.New(emitter.Config{DisableNotify: !o.Notify})
	if err != nil {
		return Result{}, err
	}
	body := payload(o.Payload)
	return emitRun(ctx, o, "emit-batch", func(ctx context.Context, tx pgx.Tx, n int) error {
		events := make([]outbox.Event, n) // per call: writers run at once
		for i := range events {
			events[i] = outbox.Event{Type: eventType, Payload: body}
		}
		_, err := em.Emit(ctx, tx, events...)
		return err
	}, o.Batch)
}

// emitRun runs N events through W writers, per events per transaction, on a
// fresh migrated database, then verifies that all N rows of outbox_events
// are PENDING.
func emitRun(ctx context.Context, o Options, mode string, write func(context.Context, pgx.Tx, int) error, per int) (Result, error) {
	return emitRunIn(ctx, o, "outbox_events", mode, write, per)
}

// emitRunIn is emitRun for the events table table (which has a status
// column set to PENDING on insert).
func emitRunIn(ctx context.Context, o Options, table, mode string, write func(context.Context, pgx.Tx, int) error, per int) (Result, error) {
	return emitRunWith(ctx, o, nil, `SELECT count(*) FROM `+table+` WHERE status = 'PENDING'`, mode, write, per)
}

// emitRunWith is emitRunIn with setup run on the migrated database before
// the writers start (nil: none), and countSQL counting the rows written.
func emitRunWith(ctx context.Context, o Options, setup func(context.Context, *benchDB) error, countSQL, mode string,
	write func(context.Context, pgx.Tx, int) error, per int) (Result, error) {
	writers := o.Writers
	if per > 1 {
		writers = max(1, min(o.Writers, o.N/per))
	}
	db, err := openDB(ctx, o.URL, writers+1)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	if err := db.migrate(ctx); err != nil {
		return Result{}, err
	}
	if setup != nil {
		if err := setup(ctx, db); err != nil {
			return Result{}, err
		}
	}
	trips0 := db.trips.total()
	if o.SQLTime {
		db.trips.stmts = &stmtTimes{}
		db.trips.stmts.reset()
	}
	start := time.Now()
	if err := inTxs(ctx, db, writers, o.N, per, write); err != nil {
		return Result{}, err
	}
	res := throughput(mode, o.N, time.Since(start))
	res.Params = map[string]any{"writers": writers, "per_tx": per, "payload": o.Payload, "notify": o.Notify, "notify_every": o.NotifyEvery,
		"round_trips": db.trips.total() - trips0}
	if o.SQLTime {
		res.Params["sql_ms"] = db.trips.stmts.snapshot()
	}
	return res.verify(ctx, db, o.N, countSQL)
}

// inTxs commits transactions from writers goroutines until n events are
// written, per events per transaction (the last may be smaller).
func inTxs(ctx context.Context, db *benchDB, writers, n, per int, write func(context.Context, pgx.Tx, int) error) error {
	var next atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range writers {
		g.Go(func() error {
			for {
				end := int(next.Add(int64(per)))
				size := min(per, n-(end-per))
				if size <= 0 {
					return nil
				}
				if err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return write(ctx, tx, size) }); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// preload inserts n due PENDING events through the emitter (COPY batches
// of 5,000, no notify), with keys partition keys round robin (none when
// keys is 0) and types event types round robin (see benchType).
func preload(ctx context.Context, db *benchDB, n, size, keys, types int) error {
	em, err := emitter.New(emitter.Config{DisableNotify: true})
	if err != nil {
		return err
	}
	events := make([]outbox.Event, 5000)
	body := payload(size)
	var written atomic.Int64
	err = inTxs(ctx, db, 2, n, len(events), func(ctx context.Context, tx pgx.Tx, k int) error {
		batch := make([]outbox.Event, k)
		for i := range batch {
			w := written.Add(1)
			batch[i] = outbox.Event{Type: benchType(w, types), Payload: body, PartitionKey: benchKey(w, keys)}
		}
		_, err := em.Emit(ctx, tx, batch...)
		return err
	})
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	return err
}

// benchType is the event type of the i-th preloaded event: eventType with
// at most one type, else eventType.<i mod types>.
func benchType(i int64, types int) string {
	if types <= 1 {
		return eventType
	}
	return eventType + "." + strconv.FormatInt(i%int64(types), 10)
}

// benchTypes are the types benchType gives out with types types.
func benchTypes(types int) []string {
	if types <= 1 {
		return []string{eventType}
	}
	out := make([]string, types)
	for i := range out {
		out[i] = benchType(int64(i), types)
	}
	return out
}

// benchKey is the partition key of the i-th preloaded event: "" without
// keys, else one of keys keys, round robin.
func benchKey(i int64, keys int) string {
	if keys == 0 {
		return ""
	}
	return "key-" + strconv.FormatInt(i%int64(keys), 10)
}

// ordering is the dispatcher's Ordering of a run.
func ordering(o Options) dispatcher.Ordering {
	if o.Ordered {
		return dispatcher.PerKey
	}
	return dispatcher.Unordered
}

// pgoutboxDispatch drains o.N preloaded events with a no-op handler per
// event type (-types), with DeleteSent when asked, and counts the claims
// that ran out of time (OnError) and the slowest claim statement.
func pgoutboxDispatch(ctx context.Context, o Options) (Result, error) {
	db, err := backlogDB(ctx, o, 8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	var claimTimeouts atomic.Int64
	d, err := dispatcher.New(db.pool, dispatcher.Config{
		BatchSize: o.Batch, Concurrency: o.Concurrency, Claimers: o.Claimers, PollInterval: o.Poll,
		Wakeup: dispatcher.WakeupDisabled, Logger: quietLogger, Ordering: ordering(o), DeleteSent: o.DeleteSent,
		OnError: func(err error) {
			if claimTimedOut(err) {
				claimTimeouts.Add(1)
			}
		},
	})
	if err != nil {
		return Result{}, err
	}
	for _, typ := range benchTypes(o.Types) {
		if err := d.Handle(typ, func(context.Context, outbox.Event) error { return nil }); err != nil {
			return Result{}, err
		}
	}
	trips0 := db.trips.total()
	db.trips.resetSlowest()
	elapsed, err := runUntil(ctx, d, uint64(o.N), func(s dispatcher.Stats) uint64 { return s.Sent })
	if err != nil {
		return Result{}, err
	}
	res := throughput("dispatch", o.N, elapsed)
	s := d.Stats()
	res.Params = map[string]any{"batch": o.Batch, "concurrency": o.Concurrency, "conns": 8, "keys": o.Keys, "ordered": o.Ordered,
		"claims": s.ClaimCycles, "round_trips": db.trips.total() - trips0, "types": max(o.Types, 1), "delete_sent": o.DeleteSent,
		"claim_timeouts": claimTimeouts.Load(), "errors": s.Errors, "slowest_claim_ms": db.trips.slowestMS()}
	return res.verifySent(ctx, db, o.N, o.DeleteSent)
}

// claimTimedOut reports whether an error the dispatcher passed to OnError
// is a claim that ran out of time: the server's statement_timeout or
// cancel (57014), or the operation's deadline.
func claimTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014")
	return timedOut && strings.Contains(err.Error(), "claim")
}

// runUntil runs d until count(stats) reaches n, stops it and returns the
// time from Run to then. It reads Stats every 20ms until 98% of n is
// counted, then every millisecond: reading them every 2ms throughout cost
// the dispatcher about 7% of its throughput on 2 cores (issue 16), which
// the raw loops it is compared with do not pay.
func runUntil(ctx context.Context, d *dispatcher.Dispatcher, n uint64, count func(dispatcher.Stats) uint64) (time.Duration, error) {
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- d.Run(ctx) }()
	near := n - n/50
	for got := uint64(0); got < n; got = count(d.Stats()) {
		wait := 20 * time.Millisecond
		if got >= near {
			wait = time.Millisecond
		}
		select {
		case err := <-runErr:
			return 0, fmt.Errorf("dispatcher stopped early: %w", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
	}
	elapsed := time.Since(start)
	return elapsed, stopWithin(ctx, d.Stop)
}
