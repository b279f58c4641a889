// Command quickstart shows the promise of a transactional outbox: a service
// writes its business row and its event in one transaction, so both are
// saved or neither is.
//
// It migrates an outbox into the schema pgoutbox_demo, places a few orders,
// each in a transaction that inserts the order and emits "order.created",
// shows that a rolled-back transaction leaves neither behind, and prints
// the outbox rows waiting for a dispatcher.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/quickstart
//
// Every run uses fresh IDs, so it can be run again and again.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// table is the demo's outbox: pgoutbox_demo.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo"}

// Order is the business row, and the payload of its event.
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
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()

	// Once at start-up: create or upgrade the outbox table. Safe when many
	// replicas do it at once.
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo.orders (
		id          uuid PRIMARY KEY,
		customer    text NOT NULL,
		total_cents bigint NOT NULL)`)
	if err != nil {
		return err
	}

	e, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return err
	}

	// Each order and its event in one transaction: both commit together.
	var eventIDs []uuid.UUID
	for _, o := range []Order{newOrder("ada", 4200), newOrder("grace", 1999), newOrder("linus", 500)} {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			id, err := placeOrder(ctx, tx, e, o)
			eventIDs = append(eventIDs, id)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "committed: order %s and its event\n", o.ID)
	}

	// A transaction that fails after both writes rolls both back.
	lost := newOrder("mallory", 100)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := placeOrder(ctx, tx, e, lost); err != nil {
			return err
		}
		return errors.New("payment declined")
	})
	fmt.Fprintf(out, "rolled back (%v): ", err)
	if err := showNothingOf(ctx, conn, out, lost.ID); err != nil {
		return err
	}

	// What a dispatcher will pick up: committed events, PENDING.
	return printEvents(ctx, conn, out, eventIDs)
}

func newOrder(customer string, totalCents int64) Order {
	return Order{ID: uuid.New(), Customer: customer, TotalCents: totalCents}
}

// placeOrder inserts the order and emits its event in the caller's
// transaction, and returns the event's ID.
func placeOrder(ctx context.Context, tx pgx.Tx, e *emitter.Emitter, o Order) (uuid.UUID, error) {
	_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo.orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
		o.ID, o.Customer, o.TotalCents)
	if err != nil {
		return uuid.Nil, err
	}
	ev, err := outbox.NewJSON("order.created", o)
	if err != nil {
		return uuid.Nil, err
	}
	ev.AggregateType, ev.AggregateID = "order", o.ID.String()
	ids, err := e.Emit(ctx, tx, ev)
	if err != nil {
		return uuid.Nil, err
	}
	return ids[0], nil
}

// showNothingOf prints how many orders and events the order has left.
func showNothingOf(ctx context.Context, conn *pgx.Conn, out io.Writer, orderID uuid.UUID) error {
	var orders, events int
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pgoutbox_demo.orders WHERE id = $1),
		(SELECT count(*) FROM pgoutbox_demo.outbox_events WHERE aggregate_id = $1::text)`,
		orderID).Scan(&orders, &events)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d order rows, %d event rows\n\n", orders, events)
	return nil
}

func printEvents(ctx context.Context, conn *pgx.Conn, out io.Writer, ids []uuid.UUID) error {
	rows, err := conn.Query(ctx, `SELECT id, event_type, status, attempts, next_attempt_at
		FROM pgoutbox_demo.outbox_events WHERE id = ANY($1) ORDER BY seq`, ids)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTYPE\tSTATUS\tATTEMPTS\tNEXT ATTEMPT AT")
	var (
		id       uuid.UUID
		typ      string
		status   string
		attempts int
		next     time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &typ, &status, &attempts, &next}, func() error {
		_, err := fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", id, typ, status, attempts, next.Format(time.RFC3339))
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
