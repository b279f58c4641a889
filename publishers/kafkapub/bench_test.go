package kafkapub_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// BenchmarkPublish measures one Publish call of a batch of fully populated
// events (about 100 bytes of payload, 10 headers) to a three-partition
// topic on an in-process kfake broker that acknowledges without storing
// (kfake.BlackholeProduce), so the figures are the client's cost plus a
// loopback round trip, not a real cluster's.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			br := newFakeBroker(b, kfake.BlackholeProduce())
			topic := br.newTopic(b)
			p := br.publisher(b, kafkapub.Config{})
			msgs := make([]outbox.Message, size)
			for i := range msgs {
				msgs[i] = outbox.Message{Destination: topic, Event: outboxtest.NewEvent(i)}
			}
			publishLoop(b, p, msgs)
		})
	}
}

// BenchmarkPublishKeyOrder compares Publish with and without
// Config.KeyOrder for one call of 1,000 messages of one key (a run that
// KeyOrder produces one round trip at a time) and of 1,000 keys (one
// message each, produced at once either way), on the same kfake broker
// as BenchmarkPublish.
func BenchmarkPublishKeyOrder(b *testing.B) {
	const size = 1000
	for _, keys := range []int{1, size} {
		for _, keyOrder := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/KeyOrder=%t", keys, keyOrder), func(b *testing.B) {
				br := newFakeBroker(b, kfake.BlackholeProduce())
				topic := br.newTopic(b)
				p := br.publisher(b, kafkapub.Config{KeyOrder: keyOrder})
				msgs := make([]outbox.Message, size)
				for i := range msgs {
					e := outboxtest.NewEvent(i)
					e.PartitionKey = fmt.Sprintf("key-%d", i%keys)
					msgs[i] = outbox.Message{Destination: topic, Event: e}
				}
				publishLoop(b, p, msgs)
			})
		}
	}
}

// publishLoop publishes msgs in one call per iteration and reports the
// events per second.
func publishLoop(b *testing.B, p *kafkapub.Publisher, msgs []outbox.Message) {
	b.ReportAllocs()
	for b.Loop() {
		for i, err := range p.Publish(context.Background(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "events/s")
}
