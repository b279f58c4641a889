package pgwatermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// BenchmarkPublish measures Publish in the caller's transaction: one
// transaction per op holding batch messages.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(map[int]string{1: "batch=1", 100: "batch=100"}[batch], func(b *testing.B) {
			db := newDB(b, false)
			ctx := runContext(b)
			pub, err := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{Emitter: emitterConfig(db)})
			require.NoError(b, err)
			msgs := make([]*message.Message, batch)
			b.ReportAllocs()
			for b.Loop() {
				require.NoError(b, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					for i := range msgs {
						msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
						msgs[i].SetContext(pgwatermill.WithTx(ctx, tx))
					}
					return pub.Publish("t", msgs...)
				}))
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSubscribe measures the Subscriber's delivery: b.N messages
// committed first, then received and acknowledged one after the other by
// one consumer, unordered or under one order key.
func BenchmarkSubscribe(b *testing.B) {
	for _, ordering := range []dispatcher.Ordering{dispatcher.Unordered, dispatcher.PerKey} {
		b.Run("ordering="+ordering.String(), func(b *testing.B) {
			db := newDB(b, ordering == dispatcher.PerKey)
			ctx := runContext(b)
			pub, err := pgwatermill.NewPublisher(db.Pool, pgwatermill.PublisherConfig{
				Emitter:      emitterConfig(db),
				OrderKeyFunc: func(p pgwatermill.OrderKeyParams) string { return p.Topic },
			})
			require.NoError(b, err)
			for range b.N {
				require.NoError(b, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))))
			}
			sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{
				Dispatcher: dispatcher.Config{Table: db.Table, Ordering: ordering, Logger: quietLogger},
			})
			require.NoError(b, err)
			b.ResetTimer()
			msgs, err := sub.Subscribe(ctx, "t")
			require.NoError(b, err)
			for range b.N {
				msg := <-msgs
				msg.Ack()
			}
			b.StopTimer()
			require.NoError(b, sub.Close())
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
