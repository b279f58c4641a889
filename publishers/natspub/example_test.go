package natspub_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// A Publisher on the JetStream context a service builds (connection, TLS,
// credentials pass through). A service gives it to its dispatcher
// (dispatcher.Config{Publisher: p}), which calls Publish with batches of
// events and their destinations; here Publish is called by hand. Each
// message is a CloudEvent in NATS's binary content mode: the payload is
// the body, the event's fields are ce- headers, and Nats-Msg-Id lets the
// server drop a republished event within its duplicate window.
func ExampleNew() {
	js, closeConn := exampleJetStream() // nats.Connect(url), then jetstream.New(nc)
	defer closeConn()
	stream, prefix, drop := exampleStream(js) // a stream capturing "<prefix>>"
	defer drop()

	p, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix, Source: "/orders-service"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := exampleEvent() // an order.created event, as the dispatcher hands it out
	errs := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})
	fmt.Println("published:", errs[0])

	msg, err := stream.GetLastMsgForSubject(ctx, prefix+e.Type)
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.TrimPrefix(msg.Subject, prefix), string(msg.Data))
	for _, name := range slices.Sorted(maps.Keys(msg.Header)) {
		fmt.Printf("  %s: %s\n", name, msg.Header.Get(name))
	}
	// Output:
	// published: <nil>
	// order.created {"total_cents":4200}
	//   Nats-Msg-Id: 01938a4e-7c00-7000-8000-000000000001
	//   ce-aggregatetype: order
	//   ce-datacontenttype: application/json
	//   ce-id: 01938a4e-7c00-7000-8000-000000000001
	//   ce-source: /orders-service
	//   ce-specversion: 1.0
	//   ce-subject: o-1
	//   ce-type: order.created
}

// A consumer turns each message back into the event. Its ID is stable
// across redeliveries: deduplicate on it (see package inbox), and
// acknowledge after the work committed.
func ExampleDecodeJetStream() {
	js, closeConn := exampleJetStream()
	defer closeConn()
	stream, prefix, drop := exampleStream(js)
	defer drop()
	examplePublish(js, prefix, exampleEvent()) // a dispatcher published order.created

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		panic(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)) // or cons.Consume(handler)
	if err != nil {
		panic(err)
	}
	e, err := natspub.DecodeJetStream(msg)
	if err != nil { // errors.Is(err, natspub.ErrNotAnEvent): not written by pgoutbox
		_ = msg.Term()
		return
	}
	fmt.Println(e.ID, e.Type, e.AggregateID, string(e.Payload))
	_ = msg.Ack()
	// Output:
	// 01938a4e-7c00-7000-8000-000000000001 order.created o-1 {"total_cents":4200}
}
