// Command watermill forwards outbox events to a Watermill Publisher
// through Watermill's router: orders and their messages are committed
// together with the pgwatermill Publisher, a router handler subscribes to
// the committed events with the pgwatermill Subscriber and republishes
// each to another Pub/Sub, and a consumer reads them there and prints
// them.
//
// It migrates an outbox into the schema pgoutbox_demo_watermill, places a
// few orders (each order row and its order.created message in one
// transaction), runs the router, and prints every message the consumer
// receives until all have arrived.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/watermill
//
// The destination is Watermill's in-process gochannel Pub/Sub, or RabbitMQ
// (watermill-amqp, a durable queue named "orders") when AMQP_URL is set,
// e.g. AMQP_URL=amqp://guest:guest@127.0.0.1:5672/. Any Watermill
// Publisher fits: Kafka, NATS, Google Cloud Pub/Sub, ... The router acks
// an outbox message (SENT) only after the destination accepted its copy,
// and nacks it (a retry, on the dispatcher's backoff) when the
// destination refused it. It empties its tables first, so it can be run
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
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const (
	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// eventType is the outbox topic; destTopic the destination's.
	eventType = "order.created"
	destTopic = "orders"
)

// table is the demo's outbox: pgoutbox_demo_watermill.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_demo_watermill"}

func main() {
	orders := flag.Int("orders", 10, "how many orders to place")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Getenv("AMQP_URL"), *orders, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL, amqpURL string, orders int, out io.Writer) error {
	logger := watermill.NopLogger{}
	pool, err := setUp(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	destPub, destSub, err := destination(amqpURL, logger, out)
	if err != nil {
		return err
	}
	defer func() { _ = destPub.Close(); _ = destSub.Close() }()
	received, err := destSub.Subscribe(ctx, destTopic) // before anything is forwarded
	if err != nil {
		return err
	}

	ids, err := placeOrders(ctx, pool, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %d orders, each with its %s message\n", len(ids), eventType)

	routerDone, stopRouter, err := forward(ctx, pool, destPub, logger)
	if err != nil {
		return err
	}
	recvErr := receive(ctx, received, ids, out)
	return errors.Join(recvErr, stopRouter(), <-routerDone)
}

// destination returns the Pub/Sub the router forwards to: RabbitMQ when
// amqpURL is set, else an in-process gochannel.
func destination(amqpURL string, logger watermill.LoggerAdapter, out io.Writer) (message.Publisher, message.Subscriber, error) {
	if amqpURL == "" {
		fmt.Fprintln(out, "AMQP_URL is unset: forwarding to an in-process gochannel Pub/Sub")
		ch := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
		return ch, ch, nil
	}
	fmt.Fprintln(out, "forwarding to RabbitMQ, durable queue", destTopic)
	cfg := amqp.NewDurableQueueConfig(amqpURL)
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		_ = pub.Close()
		return nil, nil, err
	}
	return pub, sub, nil
}

// forward runs a router whose one handler takes the committed outbox
// messages of eventType and publishes a copy of each to destPub. It
// returns once the router runs; stop closes it (and the Subscriber, which
// gives back what was not acked), and done yields Run's result.
func forward(ctx context.Context, pool *pgxpool.Pool, destPub message.Publisher, logger watermill.LoggerAdapter) (done <-chan error, stop func() error, err error) {
	sub, err := pgwatermill.NewSubscriber(pool, pgwatermill.SubscriberConfig{
		Dispatcher: dispatcher.Config{Table: table, PollInterval: 100 * time.Millisecond},
	})
	if err != nil {
		return nil, nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, nil, err
	}
	router.AddHandler("outbox-forwarder", eventType, sub, destTopic, destPub,
		func(msg *message.Message) ([]*message.Message, error) {
			// The copy keeps the UUID, the metadata and the payload; a
			// consumer deduplicates on the UUID (at-least-once).
			return []*message.Message{msg.Copy()}, nil
		})
	result := make(chan error, 1)
	go func() { result <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-result:
		return nil, nil, err
	}
	stop = func() error { return errors.Join(router.Close(), sub.Close()) }
	return result, stop, nil
}

// receive prints the messages of this run as they arrive at the
// destination, acking each, until every one of ids came. Messages of
// earlier runs left in a durable queue are acked and skipped.
func receive(ctx context.Context, received <-chan *message.Message, ids []string, out io.Writer) error {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case msg, ok := <-received:
			if !ok {
				return errors.New("the destination closed its channel")
			}
			if want[msg.UUID] {
				fmt.Fprintf(out, "received %s  order %s  %s\n", msg.UUID, msg.Metadata.Get(pgwatermill.MetadataAggregateID), msg.Payload)
				delete(want, msg.UUID)
			}
			msg.Ack()
		case <-ctx.Done():
			return fmt.Errorf("%d messages did not arrive: %w", len(want), ctx.Err())
		}
	}
	fmt.Fprintf(out, "All %d messages arrived.\n", len(ids))
	return nil
}

func setUp(ctx context.Context, url string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgoutbox_demo_watermill.orders (
		id          uuid PRIMARY KEY,
		total_cents bigint NOT NULL);
	TRUNCATE pgoutbox_demo_watermill.orders, pgoutbox_demo_watermill.outbox_events,
		pgoutbox_demo_watermill.outbox_events_dead, pgoutbox_demo_watermill.outbox_events_sent`)
	if err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, url)
}

// placeOrders commits n orders, each order row and its message in one
// transaction, and returns the messages' UUIDs.
func placeOrders(ctx context.Context, pool *pgxpool.Pool, n int) ([]string, error) {
	// A nil pool: a Publish outside a business transaction is refused
	// (pgwatermill.ErrNoTx).
	pub, err := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{Emitter: emitter.Config{Table: table}})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, n)
	for i := range n {
		id, total := uuid.New(), 1000+i
		msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"id":%q,"total_cents":%d}`, id, total))
		msg.Metadata.Set(pgwatermill.MetadataAggregateType, "order")
		msg.Metadata.Set(pgwatermill.MetadataAggregateID, id.String())
		msg.Metadata.Set(pgwatermill.MetadataContentType, outbox.ContentTypeJSON)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO pgoutbox_demo_watermill.orders (id, total_cents) VALUES ($1, $2)`, id, total)
			if err != nil {
				return err
			}
			msg.SetContext(pgwatermill.WithTx(ctx, tx))
			return pub.Publish(eventType, msg)
		})
		if err != nil {
			return nil, err
		}
		ids = append(ids, msg.UUID)
	}
	return ids, nil
}
