package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the benchmark job: a payload of o.Payload bytes.
type riverArgs struct {
	Body []byte `json:"body"`
}

// Kind names the job kind.
func (riverArgs) Kind() string { return "bench" }

// riverWorker does nothing, like River's own benchmark worker.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
}

// Work succeeds at once.
func (riverWorker) Work(context.Context, *river.Job[riverArgs]) error { return nil }

// quietLogger drops River's logs.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// runRiver runs River: insert (InsertTx, one job and one business row per
// transaction), insert-many (InsertManyTx of Batch jobs) and work (drain N
// jobs with a no-op worker; -tuned for short fetch intervals).
func runRiver(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{
		{"insert", func(ctx context.Context, o Options) (Result, error) { return riverInsert(ctx, o, false) }},
		{"insert-many", func(ctx context.Context, o Options) (Result, error) { return riverInsert(ctx, o, true) }},
		{"work", riverWork},
	})
}

// riverSetup opens a database with River's schema and the business table.
func riverSetup(ctx context.Context, o Options, conns int) (*benchDB, error) {
	db, err := openDB(ctx, o.URL, conns)
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(db.pool), &rivermigrate.Config{Logger: quietLogger})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err == nil {
		_, err = db.pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, amount int NOT NULL, note text)`)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func riverInsert(ctx context.Context, o Options, many bool) (Result, error) {
	per, mode := 1, "insert"
	if many {
		per, mode = o.Batch, "insert-many"
	}
	writers := o.Writers
	if many {
		writers = max(1, min(o.Writers, o.N/per))
	}
	db, err := riverSetup(ctx, o, writers+1)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Logger: quietLogger})
	if err != nil {
		return Result{}, err
	}
	args := riverArgs{Body: payload(o.Payload)}
	start := time.Now()
	err = inTxs(ctx, db, writers, o.N, per, func(ctx context.Context, tx pgx.Tx, n int) error {
		if !many {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
				return err
			}
			_, err := client.InsertTx(ctx, tx, args, nil)
			return err
		}
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i].Args = args
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res := throughput(mode, o.N, time.Since(start))
	res.Params = map[string]any{"writers": writers, "per_tx": per, "payload": o.Payload}
	return res.verify(ctx, db, o.N, `SELECT count(*) FROM river_job WHERE state = 'available'`)
}

// riverConfig is River's configuration for the work mode: its defaults
// with MaxWorkers = Concurrency, or, tuned, the settings of River's own
// benchmark (2ms cooldown, 20ms poll).
func riverConfig(o Options, workers *river.Workers) *river.Config {
	cfg := &river.Config{
		Logger:  quietLogger,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Concurrency}},
		Workers: workers,
	}
	if o.Tuned {
		cfg.FetchCooldown = 2 * time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
	}
	return cfg
}

func riverWork(ctx context.Context, o Options) (Result, error) {
	db, err := riverSetup(ctx, o, 8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{})
	client, err := river.NewClient(riverpgxv5.New(db.pool), riverConfig(o, workers))
	if err != nil {
		return Result{}, err
	}
	if err := riverPreload(ctx, client, o); err != nil {
		return Result{}, err
	}
	elapsed, err := riverDrain(ctx, client, o.N)
	if err != nil {
		return Result{}, err
	}
	res := throughput("work", o.N, elapsed)
	res.Params = map[string]any{"tuned": o.Tuned, "max_workers": o.Concurrency, "conns": 8}
	return res.verify(ctx, db, o.N, `SELECT count(*) FROM river_job WHERE state = 'completed'`)
}

// riverPreload inserts N jobs with InsertManyFast in batches of 5,000.
func riverPreload(ctx context.Context, client *river.Client[pgx.Tx], o Options) error {
	args := riverArgs{Body: payload(o.Payload)}
	for done := 0; done < o.N; {
		params := make([]river.InsertManyParams, min(5000, o.N-done))
		for i := range params {
			params[i].Args = args
		}
		n, err := client.InsertManyFast(ctx, params)
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// riverDrain starts the client and counts completions on its subscription,
// as River's benchmark does, until n jobs completed; then stops it.
func riverDrain(ctx context.Context, client *river.Client[pgx.Tx], n int) (time.Duration, error) {
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancelSub()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	var elapsed time.Duration
	for done := 0; done < n; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("job %d ended %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	elapsed = time.Since(start)
	return elapsed, stopWithin(ctx, client.Stop)
}
