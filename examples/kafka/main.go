// Command kafka delivers outbox events to Kafka from end to end: orders and
// their events are committed together, a dispatcher produces the committed
// events with kafkapub, and a franz-go consumer reads them back and prints
// them.
//
// It migrates an outbox into the schema pgoutbox_demo_kafka, places a few
// orders (each order row and its order.created event in one transaction),
// creates the topic the dispatcher routes to, runs the dispatcher, and
// prints every event the consumer receives until all have arrived.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/kafka
//
// KAFKA_BROKERS (comma-separated host:port) chooses a Kafka cluster; when it
// is unset, the demo starts franz-go's in-process kfake cluster. It empties
// its tables first and skips records of earlier runs, so it can be run
// again and again.
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
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

const (
	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// topicPrefix is prepended to the router's destination (by default the
	// event type), so order.created events go to demo.order.created.
	topicPrefix = "demo."
	topic       = topicPrefix + "order.created"
)

// table is the demo's outbox: pgoutbox_demo_kafka.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo_kafka"}

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
	// produces with acks=all and the idempotent producer.
	pub, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: topicPrefix}, kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer pub.Close()

	ids, err := placeOrders(ctx, pool, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %d orders, each with its order.created event\n", len(ids))

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

	recvErr := receive(ctx, seeds, ids, out)
	stopErr := d.Stop(ctx)
	return errors.Join(recvErr, stopErr)
}

// createTopic creates the topic the dispatcher produces to, unless it
// exists.
func createTopic(ctx context.Context, seeds []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, topic)
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
			fmt.Fprintf(out, "received %s  %s  order %s  (topic %s, partition %d, offset %d)\n",
				e.ID, e.Type, e.AggregateID, r.Topic, r.Partition, r.Offset)
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
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_kafka.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL);
	TRUNCATE pgoutbox_demo_kafka.orders, pgoutbox_demo_kafka.outbox_events, pgoutbox_demo_kafka.outbox_events_dead, pgoutbox_demo_kafka.outbox_events_sent`)
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
			_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo_kafka.orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
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
