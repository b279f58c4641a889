package main

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// benchLog is the log the log case writes into (issue 27): outbox.KindLog,
// beside the outbox in the same database.
var benchLog = outbox.Table{Schema: "public", Name: "event_log"}

// runLog runs the emitter into a log (emitter.Config.Kind outbox.KindLog,
// docs/relay-design.md §1.5), the rows the minimal case's modes write
// beside it: emit (one event and one business row per transaction, W
// writers; compare minimal insert) and emit-batch (Batch events per
// transaction: the emitter's INSERT below 500 events, its COPY from
// 500 on; compare minimal insert-multi and copy at the same batch).
func runLog(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{{"emit", logEmit}, {"emit-batch", logEmitBatch}})
}

// migrateLog creates the log in the run's database.
func migrateLog(ctx context.Context, db *benchDB) error {
	return migrations.Migrate(ctx, db.pool, migrations.Config{Table: benchLog, Kind: outbox.KindLog})
}

// logCountSQL counts the log's rows.
const logCountSQL = `SELECT count(*) FROM event_log`

func logEmitter(o Options) (*emitter.Emitter, error) {
	return emitter.New(emitter.Config{Table: benchLog, Kind: outbox.KindLog, MaxPayloadBytes: max(o.Payload, emitter.DefaultMaxPayloadBytes)})
}

func logEmit(ctx context.Context, o Options) (Result, error) {
	em, err := logEmitter(o)
	if err != nil {
		return Result{}, err
	}
	body := payload(o.Payload)
	o.Notify = false
	return emitRunWith(ctx, o, migrateLog, logCountSQL, "emit", func(ctx context.Context, tx pgx.Tx, _ int) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
			return err
		}
		_, err := em.Emit(ctx, tx, outbox.Event{Type: eventType, AggregateType: "order", Payload: body})
		return err
	}, 1)
}

func logEmitBatch(ctx context.Context, o Options) (Result, error) {
	em, err := logEmitter(o)
	if err != nil {
		return Result{}, err
	}
	body := payload(o.Payload)
	o.Notify = false
	return emitRunWith(ctx, o, migrateLog, logCountSQL, "emit-batch", func(ctx context.Context, tx pgx.Tx, n int) error {
		events := make([]outbox.Event, n) // per call: writers run at once
		for i := range events {
			events[i] = outbox.Event{Type: eventType, Payload: body}
		}
		_, err := em.Emit(ctx, tx, events...)
		return err
	}, o.Batch)
}
