// Command rabbitmq delivers outbox events to RabbitMQ from end to end:
// orders and their events are committed together, a dispatcher publishes
// the committed events with amqppub (publisher confirms, mandatory flag),
// and a consumer reads them from a queue and prints them.
//
// It migrates an outbox into the schema pgoutbox_demo_rabbitmq, places a
// few orders (each order row and its order.created event in one
// transaction), declares a topic exchange and a queue bound to it with
// "order.*" (the topology belongs to the service, not to pgoutbox), runs
// the dispatcher, and prints every event the consumer receives until all
// have arrived.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/rabbitmq
//
// AMQP_URL chooses the broker (default amqp://guest:guest@127.0.0.1:5672/).
// It empties its tables and its queue first, so it can be run again and
// again.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

const (
	defaultURL     = "postgres://postgres@127.0.0.1:5432/postgres"
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// exchange is the demo's topic exchange; the routing key of each event
	// is its type.
	exchange = "pgoutbox.demo.shop"
	// queue is the demo consumer's queue, bound with "order.*".
	queue = "pgoutbox.demo.billing"
)

// table is the demo's outbox: pgoutbox_demo_rabbitmq.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo_rabbitmq"}

// Order is the business row, and the payload of its event.
type Order struct {
	ID         uuid.UUID `json:"id"`
	TotalCents int64     `json:"total_cents"`
}

func main() {
	orders := flag.Int("orders", 10, "how many orders to place")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), cmp.Or(os.Getenv("AMQP_URL"), defaultAMQPURL), *orders, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL, amqpURL string, orders int, out io.Writer) error {
	pool, err := setUp(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ (AMQP_URL): %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := declare(conn)
	if err != nil {
		return err
	}

	ids, err := placeOrders(ctx, pool, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %d orders, each with its order.created event\n", len(ids))

	// The dispatcher publishes what was committed to the exchange, with
	// the router's destination, here the event type, as routing key. An
	// event no queue is bound for fails (FAILED, publish_error:
	// unroutable); an exchange not declared yet holds the events PENDING.
	pub, err := amqppub.New(amqppub.Config{URL: amqpURL, Exchange: exchange, Source: "/demo-shop"})
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:        table,
		Publisher:    pub,
		PollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	// Start checks the table and its schema, then publishes in the
	// background until Stop.
	if err := d.Start(ctx); err != nil {
		return err
	}

	recvErr := receive(ctx, ch, ids, out)
	stopErr := d.Stop(ctx)
	return errors.Join(recvErr, stopErr)
}

// declare declares the demo's topology, as a service's deploy would: a
// durable topic exchange and a durable queue bound to it with "order.*",
// emptied so the demo can run again.
func declare(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(queue, "order.*", exchange, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueuePurge(queue, false); err != nil {
		return nil, err
	}
	return ch, nil
}

// receive consumes the queue, decodes and prints every event, and returns
// once each of ids has arrived.
func receive(ctx context.Context, ch *amqp.Channel, ids []uuid.UUID, out io.Writer) error {
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	want := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the consumer's channel closed")
			}
			e, err := amqppub.Decode(d)
			if err != nil {
				fmt.Fprintln(out, "not an outbox event:", err)
				_ = d.Reject(false)
				continue
			}
			fmt.Fprintf(out, "received %s  %s  order %s  (routing key %s)\n", e.ID, e.Type, e.AggregateID, d.RoutingKey)
			_ = d.Ack(false)
			delete(want, e.ID)
		case <-ctx.Done():
			return fmt.Errorf("%d events did not arrive: %w", len(want), ctx.Err())
		}
	}
	fmt.Fprintf(out, "All %d events arrived.\n", len(ids))
	return nil
}

// setUp creates or upgrades the outbox and the business table, empties
// both, and opens a pool.
func setUp(ctx context.Context, url string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_rabbitmq.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL);
	TRUNCATE pgoutbox_demo_rabbitmq.orders, pgoutbox_demo_rabbitmq.outbox_events, pgoutbox_demo_rabbitmq.outbox_events_dead, pgoutbox_demo_rabbitmq.outbox_events_sent`)
	if err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, url)
}

// placeOrders commits n orders, each order row and its event in one
// transaction, and returns the event IDs.
func placeOrders(ctx context.Context, pool *pgxpool.Pool, n int) ([]uuid.UUID, error) {
	e, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return nil, err
	}
	var ids []uuid.UUID
	for i := range n {
		o := Order{ID: uuid.New(), TotalCents: int64(1000 + i)}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo_rabbitmq.orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
			if err != nil {
				return err
			}
			ev, err := outbox.NewJSON("order.created", o)
			if err != nil {
				return err
			}
			ev.AggregateType, ev.AggregateID = "order", o.ID.String()
			got, err := e.Emit(ctx, tx, ev)
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}
