// Command relay-kafka delivers events to Kafka through the log relay:
// orders and their events are committed together into a log table, a
// relay produces the committed events with kafkapub in commit order per
// order, and a franz-go consumer reads them back and prints them.
//
// It migrates a log (migrations.Config.Kind outbox.KindLog) into the
// schema pgoutbox_demo_relay_kafka, creates the consumer group "kafka",
// places a few orders (each order row and its order.created event in one
// transaction, then the payment and its order.paid event in a second),
// creates the topic the relay routes to, runs the relay, prints every
// event the consumer receives until all have arrived, and stops the relay.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/relay-kafka
//
// KAFKA_BROKERS (comma-separated host:port) chooses a Kafka cluster; when it
// is unset, the demo starts franz-go's in-process kfake cluster. It empties
// its business table, creates its group afresh and skips records of
// earlier runs, so it can be run again and again.
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
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/relay"
)

const (
	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// topicPrefix is prepended to the route, so every event goes to
	// demo.relay.orders.
	topicPrefix = "demo.relay."
	route       = "orders"
	topic       = topicPrefix + route
	// group is the demo's consumer group: its cursor in the log.
	group = "kafka"
)

// events is the demo's log: pgoutbox_demo_relay_kafka.events_log.
var events = outbox.Table{Schema: "pgoutbox_demo_relay_kafka", Name: "events_log"}

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
	err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Getenv("KAFKA_BROKERS"), *orders, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL, brokers string, orders int, out io.Writer) error {
	seeds := strings.Split(brokers, ",")
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Fprintln(out, "KAFKA_BROKERS is unset: started an in-process kfake cluster at", seeds[0])
	}
	if err := createTopic(ctx, seeds); err != nil {
		return err
	}
	pool, err := setUp(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// kgo options (TLS, SASL, …) pass straight through; the publisher
	// produces with acks=all and the idempotent producer, the record key
	// being the event's order key, so one order's events share a
	// partition.
	pub, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: topicPrefix}, kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer pub.Close()

	ids, err := placeOrders(ctx, pool, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %d orders, each with order.created then order.paid\n", orders)

	// The relay produces what was committed, in commit order per key
	// (the order's id). Both event types go to one topic: Kafka keeps
	// order within a partition, not across topics. It ticks, reads every
	// event committed between two ticks with one statement, and moves the
	// group's cursor once Kafka acked them all.
	r, err := relay.New(relay.Config{
		Pool: pool, Log: events, Group: group, Publisher: pub,
		RouteFunc: func(outbox.Event) string { return route },
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	// Start checks the log's schema and the group, then publishes in the
	// background until Stop.
	if err := r.Start(ctx); err != nil {
		return err
	}

	recvErr := receive(ctx, seeds, ids, out)
	// Stop lets the batch in flight finish, then stops.
	stopErr := r.Stop(ctx)
	st := r.Stats()
	fmt.Fprintf(out, "relay stopped: %d events published in %d batches, %d parked\n", st.Published, st.Batches, st.Parked)
	return errors.Join(recvErr, stopErr)
}

// createTopic creates the topic the relay produces to, with 3 partitions,
// unless it exists.
func createTopic(ctx context.Context, seeds []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, topic)
	if err == nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		err = resp.Err
	}
	return err
}

// receive consumes the topic from its start, decodes and prints every event
// of this run, and returns once each of ids has arrived. Delivery is at
// least once: a consumer deduplicates on the event ID (see examples/inbox).
func receive(ctx context.Context, seeds []string, ids []uuid.UUID, out io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	want := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for len(want) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d events did not arrive: %w", len(want), err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return errs[0].Err
		}
		for r := range fetches.RecordsAll() {
			e, err := kafkapub.Decode(r)
			if err != nil {
				fmt.Fprintln(out, "not an outbox event:", err)
				continue
			}
			if !want[e.ID] {
				continue // an earlier run's, or a duplicate
			}
			delete(want, e.ID)
			fmt.Fprintf(out, "received %s  %-13s  order %s  (topic %s, partition %d, offset %d)\n",
				e.ID, e.Type, e.AggregateID, r.Topic, r.Partition, r.Offset)
		}
	}
	fmt.Fprintf(out, "All %d events arrived.\n", len(ids))
	return nil
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
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_relay_kafka.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL,
		paid        boolean NOT NULL DEFAULT false);
	TRUNCATE pgoutbox_demo_relay_kafka.orders`)
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
			`INSERT INTO pgoutbox_demo_relay_kafka.orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	for _, o := range placed {
		got, err := inTx(ctx, pool, em, o, "order.paid",
			`UPDATE pgoutbox_demo_relay_kafka.orders SET paid = true WHERE id = $1`, o.ID)
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
