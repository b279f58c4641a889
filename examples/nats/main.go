// Command nats delivers outbox events to NATS JetStream from end to end:
// orders and their events are committed together, a dispatcher publishes
// the committed events with natspub, and a JetStream consumer reads them
// back and prints them.
//
// It migrates an outbox into the schema pgoutbox_demo_nats, places a few
// orders (each order row and its order.created event in one transaction),
// creates a stream for the subjects the dispatcher routes to, runs the
// dispatcher, and prints every event the consumer receives until all have
// arrived.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/nats
//
// NATS_URL chooses a NATS server with JetStream; when it is unset, the demo
// starts one in process. It empties its tables and its stream first, so it
// can be run again and again.
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
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

const (
	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// streamName is the demo's stream; it captures every subject under
	// subjectPrefix.
	streamName    = "PGOUTBOX_DEMO_ORDERS"
	subjectPrefix = "demo."
)

// table is the demo's outbox: pgoutbox_demo_nats.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo_nats"}

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
	err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Getenv("NATS_URL"), *orders, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL, natsURL string, orders int, out io.Writer) error {
	if natsURL == "" {
		url, stop, err := startNATS()
		if err != nil {
			return err
		}
		defer stop()
		natsURL = url
		fmt.Fprintln(out, "NATS_URL is unset: started a NATS server in process at", natsURL)
	}
	pool, err := setUp(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: subjectPrefix})
	if err != nil {
		return err
	}
	stream, err := createStream(ctx, js, pub)
	if err != nil {
		return err
	}

	ids, err := placeOrders(ctx, pool, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %d orders, each with its order.created event\n", len(ids))

	// The dispatcher publishes what was committed: the subject is the
	// prefix and the router's destination, here the event type.
	// Without PublishTypes it claims every type; RouteFunc defaults to
	// the event type, so every event has a destination. A RouteFunc that
	// returns "" for a type leaves its events PENDING (uncharged) for a
	// replica that routes them: safe during a rolling deploy.
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

	recvErr := receive(ctx, stream, ids, out)
	stopErr := d.Stop(ctx)
	return errors.Join(recvErr, stopErr)
}

// createStream (re)creates the demo's stream. Its subjects are those the
// publisher sends to: the prefix, then any destination the router gives.
// Duplicates is the window in which the stream drops a re-published event
// (same Nats-Msg-Id, the event ID): make it longer than the longest gap
// between two attempts of one event.
func createStream(ctx context.Context, js jetstream.JetStream, pub *natspub.Publisher) (jetstream.Stream, error) {
	if err := js.DeleteStream(ctx, streamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	return js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       streamName,
		Subjects:   []string{pub.Subject(">")},
		Duplicates: 10 * time.Minute,
	})
}

// receive consumes the stream, decodes and prints every event, and returns
// once each of ids has arrived.
func receive(ctx context.Context, stream jetstream.Stream, ids []uuid.UUID, out io.Writer) error {
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	want := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	arrived := make(chan struct{})
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		e, err := natspub.DecodeJetStream(msg)
		if err != nil {
			fmt.Fprintln(out, "not an outbox event:", err)
			_ = msg.Term()
			return
		}
		fmt.Fprintf(out, "received %s  %s  order %s  (subject %s)\n", e.ID, e.Type, e.AggregateID, msg.Subject())
		_ = msg.Ack()
		delete(want, e.ID) // Consume calls this function one message at a time
		if len(want) == 0 {
			close(arrived)
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-arrived:
		fmt.Fprintf(out, "All %d events arrived.\n", len(ids))
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d events did not arrive: %w", len(want), ctx.Err())
	}
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
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_nats.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL);
	TRUNCATE pgoutbox_demo_nats.orders, pgoutbox_demo_nats.outbox_events, pgoutbox_demo_nats.outbox_events_dead, pgoutbox_demo_nats.outbox_events_sent`)
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
			_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo_nats.orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
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

// startNATS starts a NATS server with JetStream in this process, on a free
// port, storing its streams in a temporary directory. stop shuts it down
// and removes the directory.
func startNATS() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "pgoutbox-demo-nats-")
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
