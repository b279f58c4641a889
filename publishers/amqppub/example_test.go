package amqppub_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// A Publisher for the exchange a service declared, with the event type as
// routing key. A service gives it to its dispatcher
// (dispatcher.Config{Publisher: p}), which calls Publish with batches of
// events and their destinations; here Publish is called by hand. Each
// message is a CloudEvent in the AMQP binding's binary content mode: the
// payload is the body, the event's fields are cloudEvents_ headers and
// message properties.
func ExampleNew() {
	ch, exchange, queue, drop := exampleTopology() // a topic exchange, a queue bound with "order.*"
	defer drop()

	p, err := amqppub.New(amqppub.Config{URL: amqpURL, Exchange: exchange, Source: "/orders-service"})
	if err != nil {
		panic(err)
	}
	defer func() { _ = p.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := exampleEvent() // an order.created event, as the dispatcher hands it out
	errs := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})
	fmt.Println("published:", errs[0])

	d := exampleGet(ch, queue)
	fmt.Println(d.RoutingKey, string(d.Body))
	fmt.Println("  message_id:", d.MessageId, "type:", d.Type, "content_type:", d.ContentType, "persistent:", d.DeliveryMode == amqp.Persistent)
	for _, name := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Printf("  %s: %v\n", name, d.Headers[name])
	}
	// Output:
	// published: <nil>
	// order.created {"total_cents":4200}
	//   message_id: 01938a4e-7c00-7000-8000-000000000001 type: order.created content_type: application/json persistent: true
	//   cloudEvents_aggregatetype: order
	//   cloudEvents_id: 01938a4e-7c00-7000-8000-000000000001
	//   cloudEvents_source: /orders-service
	//   cloudEvents_specversion: 1.0
	//   cloudEvents_subject: o-1
	//   cloudEvents_type: order.created
}

// A consumer turns each delivery back into the event. Its ID is stable
// across redeliveries: deduplicate on it (see package inbox), and
// acknowledge after the work committed.
func ExampleDecode() {
	ch, exchange, queue, drop := exampleTopology()
	defer drop()
	examplePublish(exchange, exampleEvent()) // a dispatcher published order.created

	d := exampleGet(ch, queue) // or range over ch.Consume(queue, …)
	e, err := amqppub.Decode(d)
	if err != nil { // errors.Is(err, amqppub.ErrNotAnEvent): not written by pgoutbox
		_ = d.Reject(false)
		return
	}
	fmt.Println(e.ID, e.Type, e.AggregateID, string(e.Payload))
	_ = d.Ack(false)
	// Output:
	// 01938a4e-7c00-7000-8000-000000000001 order.created o-1 {"total_cents":4200}
}

// exampleTopology declares a topic exchange and a queue bound to it with
// "order.*" on the tests' broker, as a service's deploy would, and returns
// a channel, their names, and a function that deletes them.
func exampleTopology() (ch *amqp.Channel, exchange, queue string, drop func()) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		panic(err)
	}
	if ch, err = conn.Channel(); err != nil {
		panic(err)
	}
	tag := uuid.NewString()[:8]
	exchange, queue = "amqppubexample.shop."+tag, "amqppubexample.billing."+tag
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		panic(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		panic(err)
	}
	if err := ch.QueueBind(queue, "order.*", exchange, false, nil); err != nil {
		panic(err)
	}
	return ch, exchange, queue, func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = conn.Close()
	}
}

// exampleGet waits for the next message on queue.
func exampleGet(ch *amqp.Channel, queue string) amqp.Delivery {
	for range 1000 {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			panic(err)
		}
		if ok {
			return d
		}
		time.Sleep(10 * time.Millisecond)
	}
	panic("no message on " + queue)
}

// exampleEvent is the order.created event the examples publish.
func exampleEvent() outbox.Event {
	return outbox.Event{
		ID:   uuid.MustParse("01938a4e-7c00-7000-8000-000000000001"),
		Type: "order.created", AggregateType: "order", AggregateID: "o-1",
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"total_cents":4200}`),
	}
}

// examplePublish publishes e to exchange with its type as routing key, as
// a dispatcher with an amqppub Publisher would.
func examplePublish(exchange string, e outbox.Event) {
	p, err := amqppub.New(amqppub.Config{URL: amqpURL, Exchange: exchange})
	if err != nil {
		panic(err)
	}
	defer func() { _ = p.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})[0]; err != nil {
		panic(err)
	}
}
