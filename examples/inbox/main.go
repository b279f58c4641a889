// Command inbox shows the consumer's half of exactly-once effects: a
// shipping service consumes order events from NATS JetStream and inserts one
// shipment per order, through the inbox package, in its own transaction.
//
// The consumer crashes once on purpose between its database commit and its
// ack. JetStream redelivers the message after AckWait; the inbox finds the
// event already recorded, skips the work and reports a duplicate, so the
// order still has exactly one shipment.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/inbox
//
// NATS_URL chooses a NATS server with JetStream; when it is unset, the demo
// starts one in process. It works in the schema pgoutbox_demo_inbox and
// empties its tables and its stream first, so it can be run again and again.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

const (
	defaultURL    = "postgres://postgres@127.0.0.1:5432/postgres"
	streamName    = "PGOUTBOX_DEMO_INBOX"
	subjectPrefix = "demo.inbox."
	// consumer names the shipping service: in the inbox records, and as
	// the durable JetStream consumer.
	consumer = "shipping"
	// ackWait is how long JetStream waits for an ack before it
	// redelivers; short, so that the demo does not wait long.
	ackWait = time.Second
)

// ib records, in pgoutbox_demo_inbox.outbox_inbox, the events the shipping
// service has processed.
var ib = must(inbox.New(inbox.Config{Table: outbox.Table{Schema: "pgoutbox_demo_inbox"}}))

// Order is the payload of an order.created event.
type Order struct {
	ID uuid.UUID `json:"id"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Getenv("NATS_URL"), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL, natsURL string, out io.Writer) error {
	if natsURL == "" {
		url, stop, err := startNATS()
		if err != nil {
			return err
		}
		defer stop()
		natsURL = url
	}
	pool, err := setUp(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	orders, err := publishOrders(ctx, natsURL, 3)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d order.created events are in the stream\n", len(orders))

	fmt.Fprintln(out, "\nThe shipping service starts:")
	if err := consumeThenCrash(ctx, pool, natsURL, out); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nThe shipping service restarts; JetStream redelivers what was not acknowledged:")
	if err := consume(ctx, pool, natsURL, len(orders), out); err != nil {
		return err
	}

	var shipments, shipped int
	err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT order_id) FROM pgoutbox_demo_inbox.shipments`).
		Scan(&shipments, &shipped)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d shipment rows for %d orders: exactly one each.\n", shipments, shipped)
	return nil
}

// ship handles one message in the consumer's own transaction: the inbox
// records the event and runs the work (insert the shipment) only the first
// time; a redelivery of a committed event returns Result.Duplicate.
func ship(ctx context.Context, pool *pgxpool.Pool, e outbox.Event) (inbox.Result, error) {
	var res inbox.Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = ib.Process(ctx, tx, consumer, e, func(ctx context.Context, tx pgx.Tx) error {
			var o Order
			if err := json.Unmarshal(e.Payload, &o); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo_inbox.shipments (order_id) VALUES ($1)`, o.ID)
			return err
		})
		return err
	})
	return res, err
}

// consumeThenCrash takes one message, ships it and commits, then dies
// before the ack: it closes its connection, as a killed process would.
func consumeThenCrash(ctx context.Context, pool *pgxpool.Pool, natsURL string, out io.Writer) error {
	nc, cons, err := connect(ctx, natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	batch, err := cons.Fetch(1)
	if err != nil {
		return err
	}
	msg, ok := <-batch.Messages()
	if !ok {
		return fmt.Errorf("no message: %w", batch.Error())
	}
	e, err := natspub.DecodeJetStream(msg)
	if err != nil {
		return err
	}
	if _, err := ship(ctx, pool, e); err != nil {
		return err
	}
	fmt.Fprintf(out, "  order %s  new: shipment inserted, committed\n", e.AggregateID)
	fmt.Fprintf(out, "  order %s  CRASH before the ack\n", e.AggregateID)
	return nil
}

// consume ships every message until n distinct events have been acked.
func consume(ctx context.Context, pool *pgxpool.Pool, natsURL string, n int, out io.Writer) error {
	nc, cons, err := connect(ctx, natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	acked := map[uuid.UUID]bool{}
	for len(acked) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(2*ackWait))
		if err != nil {
			return err
		}
		for msg := range batch.Messages() {
			e, err := natspub.DecodeJetStream(msg)
			if err != nil {
				_ = msg.Term() // not an event: redelivering will not help
				continue
			}
			res, err := ship(ctx, pool, e)
			switch {
			case errors.Is(err, inbox.ErrContentMismatch):
				_ = msg.Term() // the same ID with other content never succeeds
				continue
			case err != nil:
				_ = msg.Nak() // transient: the redelivery tries again
				continue
			}
			// Ack after commit, new or duplicate: the effect is committed.
			if err := msg.DoubleAck(ctx); err != nil {
				return err
			}
			acked[e.ID] = true
			if res.Duplicate {
				meta, _ := msg.Metadata()
				fmt.Fprintf(out, "  order %s  delivery %d: duplicate (processed at %s), work skipped, acked\n",
					e.AggregateID, meta.NumDelivered, res.ProcessedAt.Format(time.TimeOnly))
			} else {
				fmt.Fprintf(out, "  order %s  new: shipment inserted, committed, acked\n", e.AggregateID)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
	}
	return nil
}

// connect opens a connection and the durable consumer of the shipping
// service.
func connect(ctx context.Context, natsURL string) (*nats.Conn, jetstream.Consumer, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
		Durable:   consumer,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   ackWait,
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cons, nil
}

// publishOrders (re)creates the stream and publishes n order.created
// events to it. In a real system the order service's dispatcher publishes
// them from its outbox (see examples/nats); here they are published
// directly, to keep the demo about the consumer.
func publishOrders(ctx context.Context, natsURL string, n int) ([]outbox.Event, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := js.DeleteStream(ctx, streamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{subjectPrefix + ">"}})
	if err != nil {
		return nil, err
	}
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: subjectPrefix})
	if err != nil {
		return nil, err
	}
	msgs := make([]outbox.Message, n)
	events := make([]outbox.Event, n)
	for i := range msgs {
		o := Order{ID: uuid.New()}
		e, err := outbox.NewJSON("order.created", o)
		if err != nil {
			return nil, err
		}
		e.ID, e.AggregateType, e.AggregateID = uuid.Must(uuid.NewV7()), "order", o.ID.String()
		msgs[i], events[i] = outbox.Message{Destination: e.Type, Event: e}, e
	}
	return events, errors.Join(pub.Publish(ctx, msgs)...)
}

// setUp creates or upgrades the inbox table, creates the business table
// and empties both. shipments has no unique constraint on order_id on
// purpose: the inbox alone keeps a redelivery from shipping twice.
func setUp(ctx context.Context, url string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS pgoutbox_demo_inbox`); err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx, conn, inbox.Config{Table: ib.Table()}); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_inbox.shipments (
		id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		order_id uuid NOT NULL);
	TRUNCATE pgoutbox_demo_inbox.shipments, pgoutbox_demo_inbox.outbox_inbox`)
	if err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, url)
}

// startNATS starts a NATS server with JetStream in this process, on a free
// port, storing its streams in a temporary directory. stop shuts it down
// and removes the directory.
func startNATS() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "pgoutbox-demo-inbox-")
	if err != nil {
		return "", nil, err
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() { srv.Shutdown(); srv.WaitForShutdown(); _ = os.RemoveAll(dir) }
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return "", nil, errors.New("the in-process NATS server did not start")
	}
	return srv.ClientURL(), stop, nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
