package amqppub_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// BenchmarkPublish publishes batches of events (about 60-byte payloads,
// one user header) to a topic exchange bound to one durable-less queue
// capped at 100,000 messages (x-max-length drops the oldest), persistent
// delivery mode, and waits for every confirm.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			publishLoop(b, benchPublisher(b, false), messages("bench", size))
		})
	}
}

// BenchmarkPublishKeyOrder compares Publish with and without
// Config.KeyOrder for one call of 1,000 messages of one key (a run that
// KeyOrder sends one confirm at a time) and of 1,000 keys.
func BenchmarkPublishKeyOrder(b *testing.B) {
	const size = 1000
	for _, keys := range []int{1, size} {
		for _, keyOrder := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/KeyOrder=%t", keys, keyOrder), func(b *testing.B) {
				msgs := messages("bench", size)
				for i := range msgs {
					msgs[i].Event.PartitionKey = fmt.Sprintf("key-%d", i%keys)
				}
				publishLoop(b, benchPublisher(b, keyOrder), msgs)
			})
		}
	}
}

// benchPublisher declares the benchmark's exchange and queue and returns
// a Publisher for them.
func benchPublisher(b *testing.B, keyOrder bool) *amqppub.Publisher {
	a := newAdmin(b)
	x := a.exchange(b)
	a.queue(b, x, "#", amqp.Table{"x-max-length": int32(100_000)})
	return newPublisher(b, amqppub.Config{Exchange: x, KeyOrder: keyOrder})
}

// publishLoop publishes msgs, with fresh event IDs each time, in one call
// per iteration and reports the events per second.
func publishLoop(b *testing.B, p *amqppub.Publisher, msgs []outbox.Message) {
	b.ReportAllocs()
	batches := 0
	for b.Loop() {
		batches++
		b.StopTimer()
		for i := range msgs {
			msgs[i].Event.ID = uuid.Must(uuid.NewV7())
		}
		b.StartTimer()
		for i, err := range p.Publish(context.Background(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(batches*len(msgs))/b.Elapsed().Seconds(), "events/s")
}
