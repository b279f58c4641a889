// Command consumer is the module TestInstall builds outside the repository:
// a user's program calling the core and every published module (the
// Kafka, NATS and RabbitMQ publishers, the Watermill adapter) as installed
// from a module proxy.
// It uses only constructors and Emit, the calls least likely to change
// shape; it is built and vetted, never run.
package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

func main() {
	_ = run
}

func run(ctx context.Context, pool *pgxpool.Pool, client *kgo.Client, js jetstream.JetStream) error {
	e, err := emitter.New(emitter.Config{})
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ev, err := outbox.NewJSON("order.created", map[string]string{"id": "1"})
	if err != nil {
		return err
	}
	if _, err := e.Emit(ctx, tx, ev); err != nil {
		return err
	}
	if _, err := dispatcher.New(pool, dispatcher.Config{}); err != nil {
		return err
	}
	if _, err := kafkapub.New(client, kafkapub.Config{}); err != nil {
		return err
	}
	if _, err := natspub.New(js, natspub.Config{}); err != nil {
		return err
	}
	if _, err := amqppub.New(amqppub.Config{}); err != nil {
		return err
	}
	if _, err := pgwatermill.NewPublisher(pool, pgwatermill.PublisherConfig{}); err != nil {
		return err
	}
	if _, err := pgwatermill.NewSubscriber(pool, pgwatermill.SubscriberConfig{}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
