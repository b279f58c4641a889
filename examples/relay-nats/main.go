// Command relay-nats delivers events to NATS JetStream through the log
// relay: orders and their events are committed together into a log
// table, a relay publishes the committed events with natspub in commit
// order per order, and a JetStream consumer reads them back and prints
// them.
//
// It migrates a log (migrations.Config.Kind outbox.KindLog) into the
// schema pgoutbox_demo_relay_nats, creates the consumer group "nats",
// places a few orders (each order row and its order.created event in one
// transaction, then the payment and its order.paid event in a second),
// creates a stream for the subjects the relay routes to, runs the relay,
// prints every event the consumer receives until all have arrived, and
// stops the relay.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/relay-nats
//
// NATS_URL chooses a NATS server with JetStream; when it is unset, the demo
// starts one in process. It empties its tables and its stream and creates
// its group afresh, so it can be run again and again.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
	"github.com/pgoutbox/pgoutbox/relay"
)

const (
	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// streamName is the demo's stream; it captures every subject under
	// subjectPrefix.
	streamName    = "PGOUTBOX_DEMO_RELAY_ORDERS"
	subjectPrefix = "demo.relay."
	// group is the demo's consumer group: its cursor in the log.
	group = "nats"
)

// events is the demo's log: pgoutbox_demo_relay_nats.events_log.
var events = outbox.Table{Schema: "pgoutbox_demo_relay_nats", Name: "events_log"}

// Order is the business row, and the payload of its events.
type Order struct {
	ID         uuid.UUID `json:"id"`
	TotalCents int64     `json:"total_cents"`
}

func main() {
	orders := flag.Int("orders", 5, "how many orders to place")
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
	fmt.Fprintf(out, "committed %d orders, each with order.created then order.paid\n", orders)

	// The relay publishes what was committed, in commit order per key
	// (the order's id): the subject is the prefix and the route, by
	// default the event type. It ticks, reads every event committed
	// between two ticks with one statement, and moves the group's cursor
	// once the stream acked them all.
	r, err := relay.New(relay.Config{
		Pool: pool, Log: events, Group: group, Publisher: pub,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	// Start checks the log's schema and the group, then publishes in the
	// background until Stop.
	if err := r.Start(ctx); err != nil {
		return err
	}

	recvErr := receive(ctx, stream, ids, out)
	// Stop lets the batch in flight finish, then stops.
	stopErr := r.Stop(ctx)
	st := r.Stats()
	fmt.Fprintf(out, "relay stopped: %d events published in %d batches, %d parked\n", st.Published, st.Batches, st.Parked)
	return errors.Join(recvErr, stopErr)
}

// createStream (re)creates the demo's stream. Its subjects are those the
// publisher sends to: the prefix, then any route. Duplicates is the
// window in which the stream drops a re-published event (same
// Nats-Msg-Id, the event ID): a relay killed between the acks and its
// cursor move publishes the batch again.
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
		fmt.Fprintf(out, "received %s  %-13s  order %s  (subject %s)\n", e.ID, e.Type, e.AggregateID, msg.Subject())
		_ = msg.Ack()
		if !want[e.ID] {
			return
		}
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

// setUp creates or upgrades the log and the business table, empties the
// business table, creates the group afresh at the log's newest tick (so
// that a run publishes its own events, not an earlier run's), and opens a
// pool.
func setUp(ctx context.Context, url string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: events, Kind: outbox.KindLog}); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_relay_nats.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL,
		paid        boolean NOT NULL DEFAULT false);
	TRUNCATE pgoutbox_demo_relay_nats.orders`)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := relay.DropGroup(ctx, pool, events, group); err != nil && !errors.Is(err, relay.ErrNoGroup) {
		pool.Close()
		return nil, err
	}
	if err := relay.CreateGroup(ctx, pool, events, group, relay.Latest); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// placeOrders commits n orders, each order row and its order.created
// event in one transaction, then marks each paid with its order.paid event
// in another, and returns the event IDs. The second transaction locks the
// order's row before it emits, as every writer of a key must: then the
// log's insert order is the key's commit order.
func placeOrders(ctx context.Context, pool *pgxpool.Pool, n int) ([]uuid.UUID, error) {
	em, err := emitter.New(emitter.Config{Table: events, Kind: outbox.KindLog})
	if err != nil {
		return nil, err
	}
	placed := make([]Order, n)
	var ids []uuid.UUID
	for i := range placed {
		o := Order{ID: uuid.New(), TotalCents: int64(1000 + i)}
		placed[i] = o
		got, err := inTx(ctx, pool, em, o, "order.created",
			`INSERT INTO pgoutbox_demo_relay_nats.orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	for _, o := range placed {
		got, err := inTx(ctx, pool, em, o, "order.paid",
			`UPDATE pgoutbox_demo_relay_nats.orders SET paid = true WHERE id = $1`, o.ID)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// inTx runs the business statement and emits the event of type typ for o
// in one transaction.
func inTx(ctx context.Context, pool *pgxpool.Pool, em *emitter.Emitter, o Order, typ, stmt string, args ...any) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmt, args...); err != nil {
			return err
		}
		ev, err := outbox.NewJSON(typ, o)
		if err != nil {
			return err
		}
		ev.AggregateType, ev.AggregateID = "order", o.ID.String() // the order key
		ids, err = em.Emit(ctx, tx, ev)
		return err
	})
	return ids, err
}

// startNATS starts a NATS server with JetStream in this process, on a free
// port, storing its streams in a temporary directory. stop shuts it down
// and removes the directory.
func startNATS() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "pgoutbox-demo-relay-nats-")
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
