// Command quickstart shows the promise of a transactional outbox from end
// to end: a service writes its business row and its event in one
// transaction, so both are saved or neither is, and a dispatcher then
// delivers every committed event at least once.
//
// It migrates an outbox into the schema pgoutbox_demo, places a few orders
// (each order and its events in one transaction), shows that a rolled-back
// transaction leaves neither behind, then runs a dispatcher with local
// handlers: one succeeds, one fails twice and then succeeds, one always
// fails and ends FAILED (the dead letter). It prints each event's journey,
// PENDING → PROCESSING → SENT / retry / FAILED, and exits when every event
// has settled.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/quickstart
//
// It empties its own tables first, so it can be run again and again.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// table is the demo's outbox: pgoutbox_demo.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo"}

// Order is the business row, and the payload of its events.
type Order struct {
	ID         uuid.UUID `json:"id"`
	Customer   string    `json:"customer"`
	TotalCents int64     `json:"total_cents"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	if err := setUp(ctx, url); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	j := newJourney(out)
	if err := placeOrders(ctx, pool, j); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nThe dispatcher delivers what was committed:")
	return dispatch(ctx, pool, j)
}

// setUp creates or upgrades the outbox (safe when many replicas do it at
// once: Migrate takes an advisory lock), the business table, and empties
// both so that every run starts afresh.
func setUp(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo.orders (
		id          uuid PRIMARY KEY,
		customer    text NOT NULL,
		total_cents bigint NOT NULL);
	TRUNCATE pgoutbox_demo.orders, pgoutbox_demo.outbox_events, pgoutbox_demo.outbox_events_dead, pgoutbox_demo.outbox_events_sent`)
	return err
}

// placeOrders commits three orders with their events, and shows that a
// failed transaction leaves neither its order nor its events.
func placeOrders(ctx context.Context, pool *pgxpool.Pool, j *journey) error {
	e, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return err
	}
	orders := []struct {
		order Order
		types []string
	}{
		{Order{uuid.New(), "ada", 4200}, []string{"order.created", "payment.captured"}},
		{Order{uuid.New(), "grace", 1999}, []string{"order.created", "invoice.mailed"}},
		{Order{uuid.New(), "linus", 500}, []string{"order.created"}},
	}
	for _, o := range orders {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return placeOrder(ctx, tx, e, j, o.order, o.types...)
		})
		if err != nil {
			return err
		}
	}
	lost := Order{uuid.New(), "mallory", 100}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := placeOrder(ctx, tx, e, nil, lost, "order.created"); err != nil {
			return err
		}
		return errors.New("payment declined")
	})
	var orderRows, eventRows int
	if qerr := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pgoutbox_demo.orders WHERE id = $1),
		(SELECT count(*) FROM pgoutbox_demo.outbox_events WHERE aggregate_id = $1::text)`,
		lost.ID).Scan(&orderRows, &eventRows); qerr != nil {
		return qerr
	}
	j.printf("rolled back (%v): %d order rows, %d event rows\n", err, orderRows, eventRows)
	return nil
}

// placeOrder inserts the order and emits its events in the caller's
// transaction.
func placeOrder(ctx context.Context, tx pgx.Tx, e *emitter.Emitter, j *journey, o Order, types ...string) error {
	_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo.orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
		o.ID, o.Customer, o.TotalCents)
	if err != nil {
		return err
	}
	events := make([]outbox.Event, len(types))
	for i, typ := range types {
		if events[i], err = outbox.NewJSON(typ, o); err != nil {
			return err
		}
		events[i].AggregateType, events[i].AggregateID = "order", o.ID.String()
	}
	ids, err := e.Emit(ctx, tx, events...)
	if err != nil || j == nil {
		return err
	}
	for i, id := range ids {
		j.emitted(id, types[i], o.Customer)
	}
	return nil
}

// dispatch starts a dispatcher with the demo's handlers, waits until every
// event has settled (SENT or FAILED), shows its health, then stops it
// gracefully.
func dispatch(ctx context.Context, pool *pgxpool.Pool, j *journey) error {
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:        table,
		PollInterval: 100 * time.Millisecond,
		MaxAttempts:  3,
		Backoff:      outbox.Backoff{Initial: 300 * time.Millisecond, NoJitter: true},
		OnOutcome:    j.outcome,
		Logger:       quietLogger(),
	})
	if err != nil {
		return err
	}
	for typ, h := range handlers(j) {
		if err := d.Handle(typ, h); err != nil {
			return err
		}
	}
	// Start checks the table and its schema (a start-up error is returned
	// here, before anything is dispatched), then dispatches in the
	// background until Stop.
	if err := d.Start(ctx); err != nil {
		return err
	}
	select {
	case <-j.settled:
	case <-ctx.Done():
		_ = d.Stop(context.WithoutCancel(ctx))
		return ctx.Err()
	}
	// What a readiness or liveness probe (/healthz) would judge.
	verdict := "healthy"
	if err := d.Health().Healthy(time.Minute); err != nil {
		verdict = err.Error()
	}
	fmt.Fprintf(j.out, "\nDispatcher health: %s, %s.\n", d.Health().State, verdict)
	if err := d.Stop(ctx); err != nil { // drains in-flight handlers
		return err
	}
	j.summary()
	return nil
}

// handlers are the demo's local handlers, one per event type.
func handlers(j *journey) map[string]outbox.Handler {
	return map[string]outbox.Handler{
		// Succeeds at once.
		"order.created": func(_ context.Context, e outbox.Event) error {
			j.processing(e)
			return nil
		},
		// The payment provider is flaky: fails twice, then succeeds.
		"payment.captured": func(_ context.Context, e outbox.Event) error {
			j.processing(e)
			if e.Attempt < 3 {
				return errors.New("payment provider timed out")
			}
			return nil
		},
		// The mail server rejects the address every time: the event ends
		// FAILED once its 3 attempts are spent.
		"invoice.mailed": func(_ context.Context, e outbox.Event) error {
			j.processing(e)
			return errors.New("mailbox unavailable")
		},
	}
}
