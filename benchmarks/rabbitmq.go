package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// amqpURL is the broker of dispatch-rabbitmq: AMQP_URL, else the local
// one with RabbitMQ's default user.
func amqpURL() string { return cmp.Or(os.Getenv("AMQP_URL"), amqppub.DefaultURL) }

// dispatchRabbitMQ drains N events through amqppub into a fresh topic
// exchange on the local RabbitMQ, bound to one fresh queue (publisher
// confirms, persistent delivery mode, mandatory), and verifies that the
// queue holds N messages and the table N SENT rows.
func dispatchRabbitMQ(ctx context.Context, o Options) (Result, error) {
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return Result{}, fmt.Errorf("no RabbitMQ at AMQP_URL (default %s): %w", amqppub.DefaultURL, err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return Result{}, err
	}
	name := fmt.Sprintf("pgoutbox.bench.%d", time.Now().UnixNano())
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, true, false, false, nil); err != nil {
		return Result{}, err
	}
	defer func() { _ = ch.ExchangeDelete(name, false, false) }()
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		return Result{}, err
	}
	defer func() { _, _ = ch.QueueDelete(name, false, false, false) }()
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		return Result{}, err
	}
	pub, err := amqppub.New(amqppub.Config{URL: amqpURL(), Exchange: name})
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = pub.Close() }()
	res, err := dispatchTo(ctx, o, "dispatch-rabbitmq", pub)
	if err != nil {
		return res, err
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err == nil && q.Messages != o.N {
		err = fmt.Errorf("verify: the queue holds %d messages, want %d", q.Messages, o.N)
	}
	res.Verified = res.Verified && err == nil
	return res, err
}
