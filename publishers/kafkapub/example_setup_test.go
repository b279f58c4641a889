package kafkapub_test

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// exampleCluster starts an in-process Kafka (franz-go's kfake) with the
// given topics, standing in for a real cluster, and returns its seed
// brokers and a function that shuts it down.
func exampleCluster(topics ...string) (seeds []string, stop func()) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		panic(err)
	}
	return c.ListenAddrs(), c.Close
}

// exampleEvent is the order.created event the examples publish.
func exampleEvent() outbox.Event {
	return outbox.Event{
		ID:   uuid.MustParse("01938a4e-7c00-7000-8000-000000000001"),
		Type: "order.created", AggregateType: "order", AggregateID: "o-1",
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"total_cents":4200}`),
	}
}

// examplePublish publishes e to the topic named by its type, as a
// dispatcher with a kafkapub Publisher would.
func examplePublish(seeds []string, e outbox.Event) {
	p, err := kafkapub.NewFromOpts(kafkapub.Config{}, kgo.SeedBrokers(seeds...))
	if err != nil {
		panic(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})[0]; err != nil {
		panic(err)
	}
}

// exampleConsume reads topic from its start until a record arrives or ctx
// ends.
func exampleConsume(ctx context.Context, seeds []string, topic string) []*kgo.Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) == 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}
