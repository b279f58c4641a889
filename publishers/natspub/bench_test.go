package natspub_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// BenchmarkPublish publishes batches of fully populated events (about
// 60-byte payloads, two user headers) to a file-backed stream and waits
// for every PubAck.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			js := connect(b, natsURL)
			ts := newStream(b, js, jetstream.StreamConfig{MaxMsgs: 200_000})
			p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix})
			require.NoError(b, err)
			msgs := messages("ok.bench", size)
			publishLoop(b, p, msgs)
		})
	}
}

// BenchmarkPublishKeyOrder compares Publish with and without
// Config.KeyOrder for one call of 1,000 messages of one key (a run that
// KeyOrder sends one PubAck at a time) and of 1,000 keys (one message
// each, pipelined either way), on the same stream as BenchmarkPublish.
func BenchmarkPublishKeyOrder(b *testing.B) {
	const size = 1000
	for _, keys := range []int{1, size} {
		for _, keyOrder := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/KeyOrder=%t", keys, keyOrder), func(b *testing.B) {
				js := connect(b, natsURL)
				ts := newStream(b, js, jetstream.StreamConfig{MaxMsgs: 200_000})
				p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix, KeyOrder: keyOrder})
				require.NoError(b, err)
				msgs := messages("ok.bench", size)
				for i := range msgs {
					msgs[i].Event.PartitionKey = fmt.Sprintf("key-%d", i%keys)
				}
				publishLoop(b, p, msgs)
			})
		}
	}
}

// publishLoop publishes msgs, with fresh event IDs each time, in one call
// per iteration and reports the events per second.
func publishLoop(b *testing.B, p *natspub.Publisher, msgs []outbox.Message) {
	b.ReportAllocs()
	batches := 0
	for b.Loop() {
		batches++
		b.StopTimer()
		for i := range msgs {
			msgs[i].Event.ID = uuid.Must(uuid.NewV7()) // the stream would drop repeats
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
