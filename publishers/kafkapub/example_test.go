package kafkapub_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// A Publisher on a franz-go client the service builds and owns. A service
// gives it to its dispatcher (dispatcher.Config{Publisher: p}), which calls
// Publish with batches of events and their destinations; here Publish is
// called by hand. Each record is a CloudEvent in Kafka's binary content
// mode: the payload is the value, the event's fields are ce_ headers.
func ExampleNew() {
	seeds, stop := exampleCluster("shop.order.created") // e.g. []string{"kafka-1:9092"}
	defer stop()

	client, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	p, err := kafkapub.New(client, kafkapub.Config{TopicPrefix: "shop.", Source: "/orders-service"})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := exampleEvent() // an order.created event, as the dispatcher hands it out
	errs := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})
	fmt.Println("published:", errs[0])

	for _, r := range exampleConsume(ctx, seeds, "shop.order.created") {
		fmt.Printf("%s key=%s %s\n", r.Topic, r.Key, r.Value)
		for _, h := range r.Headers {
			fmt.Printf("  %s: %s\n", h.Key, h.Value)
		}
	}
	// Output:
	// published: <nil>
	// shop.order.created key=o-1 {"total_cents":4200}
	//   ce_id: 01938a4e-7c00-7000-8000-000000000001
	//   ce_source: /orders-service
	//   ce_specversion: 1.0
	//   ce_type: order.created
	//   ce_aggregatetype: order
	//   ce_subject: o-1
	//   content-type: application/json
}

// A consumer turns each record back into the event. Its ID is stable
// across redeliveries: deduplicate on it (see package inbox).
func ExampleDecode() {
	seeds, stop := exampleCluster("order.created")
	defer stop()
	examplePublish(seeds, exampleEvent()) // a dispatcher published order.created

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("order.created"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	received := 0
	for received == 0 && ctx.Err() == nil { // a service polls until it shuts down
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			e, err := kafkapub.Decode(r)
			if err != nil { // errors.Is(err, kafkapub.ErrNotAnEvent): not written by pgoutbox
				return
			}
			fmt.Println(e.ID, e.Type, e.AggregateID, string(e.Payload))
			received++
		})
	}
	// Output:
	// 01938a4e-7c00-7000-8000-000000000001 order.created o-1 {"total_cents":4200}
}
