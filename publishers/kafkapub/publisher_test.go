package kafkapub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// secret is put in payloads and header values; no error may contain it.
const secret = "TOP-SECRET-BYTES"

func secretEvent(i int) outbox.Event {
	e := outboxtest.NewEvent(i)
	e.Payload = []byte(`{"secret":"` + secret + `"}`)
	e.Headers = map[string]string{"x-secret": secret}
	return e
}

func toTopic(topic string, events ...outbox.Event) []outbox.Message {
	msgs := make([]outbox.Message, len(events))
	for i, e := range events {
		msgs[i] = outbox.Message{Destination: topic, Event: e}
	}
	return msgs
}

// requireErrs checks that every error is set, is (or is not) permanent, and
// carries no secret.
func requireErrs(t *testing.T, errs []error, permanent bool) {
	t.Helper()
	for i, err := range errs {
		require.Error(t, err, "message %d", i)
		require.Equal(t, permanent, outbox.IsPermanent(err), "message %d: %v", i, err)
		require.NotContains(t, err.Error(), secret)
	}
}

func TestPublish(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*broker, string) {
		t.Helper()
		b := newFakeBroker(t)
		return b, b.newTopic(t)
	}

	t.Run("ClosedPublisherIsRetryable", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		p := b.publisher(t, kafkapub.Config{})
		p.Close()
		p.Close() // idempotent
		requireErrs(t, p.Publish(context.Background(), toTopic(topic, secretEvent(1), secretEvent(2))), false)
	})

	t.Run("ConcurrentCalls", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		p := b.publisher(t, kafkapub.Config{})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				events := make([]outbox.Event, 50)
				for i := range events {
					events[i] = outboxtest.NewEvent(g*100 + i)
				}
				for i, err := range p.Publish(context.Background(), toTopic(topic, events...)) {
					require.NoError(t, err, "goroutine %d, message %d", g, i)
				}
			})
		}
		wg.Wait()
		require.Len(t, b.consume(timeout(t), t, topic, 400), 400)
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		t.Parallel()
		b, _ := setup(t)
		errs := b.publisher(t, kafkapub.Config{}).Publish(context.Background(), nil)
		require.NotNil(t, errs)
		require.Empty(t, errs)
	})

	t.Run("KeyFuncChoosesRecordKey", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		p := b.publisher(t, kafkapub.Config{KeyFunc: kafkapub.KeyAggregate})
		e := outboxtest.NewEvent(3)
		require.Equal(t, []error{nil}, p.Publish(context.Background(), toTopic(topic, e)))
		recs := b.consume(timeout(t), t, topic, 1)
		require.Len(t, recs, 1)
		require.Equal(t, e.AggregateID, string(recs[0].Key))
		got, err := kafkapub.Decode(recs[0])
		require.NoError(t, err)
		require.Equal(t, e.PartitionKey, got.PartitionKey)
	})

	t.Run("PublishTimeoutBoundsContextWithoutDeadline", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})
		p := b.publisher(t, kafkapub.Config{PublishTimeout: 300 * time.Millisecond})
		start := time.Now()
		errs := p.Publish(context.Background(), toTopic(topic, secretEvent(1), secretEvent(2)))
		require.Less(t, time.Since(start), 5*time.Second)
		requireErrs(t, errs, false)
		require.ErrorIs(t, errs[0], context.DeadlineExceeded)
	})

	t.Run("TopicPrefix", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		p := b.publisher(t, kafkapub.Config{TopicPrefix: topic[:4]})
		require.Equal(t, []error{nil}, p.Publish(context.Background(), toTopic(topic[4:], outboxtest.NewEvent(1))))
		require.Len(t, b.consume(timeout(t), t, topic, 1), 1)
	})

	t.Run("UserClientStaysOpen", func(t *testing.T) {
		t.Parallel()
		b, topic := setup(t)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		p, err := kafkapub.New(cl, kafkapub.Config{})
		require.NoError(t, err)
		require.Same(t, cl, p.Client())
		p.Close() // does not close the caller's client
		require.Equal(t, []error{nil}, p.Publish(context.Background(), toTopic(topic, outboxtest.NewEvent(1))))
	})
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, opts ...kgo.Opt) (*broker, *kafkapub.Publisher, string) {
		t.Helper()
		b := newFakeBroker(t)
		return b, b.publisher(t, kafkapub.Config{}, opts...), b.newTopic(t)
	}

	t.Run("AuthorizationFailedIsPermanent", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
		errs := p.Publish(timeout(t), toTopic(topic, secretEvent(1), secretEvent(2)))
		requireErrs(t, errs, true)
		require.ErrorIs(t, errs[0], kerr.TopicAuthorizationFailed)
	})

	t.Run("CancelledContextIsRetryable", func(t *testing.T) {
		t.Parallel()
		_, p, topic := setup(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		cause := errors.New("shutting down")
		cancel(cause)
		errs := p.Publish(ctx, toTopic(topic, secretEvent(1), secretEvent(2)))
		requireErrs(t, errs, false)
		require.ErrorIs(t, errs[1], cause)
	})

	t.Run("InvalidTopicIsPermanent", func(t *testing.T) {
		t.Parallel()
		_, p, topic := setup(t)
		msgs := toTopic(topic, secretEvent(1), secretEvent(2), secretEvent(3))
		msgs[0].Destination = "has space"
		msgs[2].Destination = ""
		errs := p.Publish(timeout(t), msgs)
		require.NoError(t, errs[1])
		requireErrs(t, []error{errs[0], errs[2]}, true)
		require.ErrorIs(t, errs[0], kerr.InvalidTopicException)
	})

	t.Run("MissingTopicIsRetryable", func(t *testing.T) {
		t.Parallel()
		// Records for a topic not created yet fail fast and retryably, and
		// are stored once it exists.
		b, p, _ := setup(t)
		topic := uniqueName("late")
		msgs := toTopic(topic, secretEvent(1), secretEvent(2))
		start := time.Now()
		errs := p.Publish(timeout(t), msgs)
		require.Less(t, time.Since(start), 5*time.Second)
		requireErrs(t, errs, false)
		require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
		b.createTopic(t, topic)
		require.Equal(t, []error{nil, nil}, p.Publish(timeout(t), msgs))
		require.Len(t, b.consume(timeout(t), t, topic, 2), 2)
	})

	t.Run("RecordTooLargeIsPermanent", func(t *testing.T) {
		t.Parallel()
		_, p, topic := setup(t, kgo.ProducerBatchMaxBytes(1024))
		big := secretEvent(1)
		big.Payload = []byte(strings.Repeat(secret, 200))
		errs := p.Publish(timeout(t), toTopic(topic, big, secretEvent(2)))
		requireErrs(t, errs[:1], true)
		require.ErrorIs(t, errs[0], kerr.MessageTooLarge)
		require.NoError(t, errs[1])
	})

	t.Run("ReservedHeaderNameIsPermanent", func(t *testing.T) {
		t.Parallel()
		_, p, topic := setup(t)
		spoof := secretEvent(1)
		spoof.Headers["ce_id"] = secret
		errs := p.Publish(timeout(t), toTopic(topic, spoof, secretEvent(2)))
		requireErrs(t, errs[:1], true)
		require.NoError(t, errs[1])
	})

	t.Run("TransientBrokerErrorIsRetried", func(t *testing.T) {
		t.Parallel()
		// franz-go retries after a metadata refresh, at most every
		// MetadataMinAge (1s from NewFromOpts).
		b, p, topic := setup(t, kgo.MetadataMinAge(10*time.Millisecond))
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 2})
		require.Equal(t, []error{nil, nil}, p.Publish(timeout(t), toTopic(topic, secretEvent(1), secretEvent(2))))
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name   string
		cfg    kafkapub.Config
		option string
	}{
		{"NegativePublishTimeout", kafkapub.Config{PublishTimeout: -time.Second}, "PublishTimeout"},
		{"PublishTimeoutAboveAnHour", kafkapub.Config{PublishTimeout: 2 * time.Hour}, "PublishTimeout"},
		{"PublishTimeoutBelowAMillisecond", kafkapub.Config{PublishTimeout: time.Microsecond}, "PublishTimeout"},
		{"TopicPrefixBadCharacter", kafkapub.Config{TopicPrefix: "a/b"}, "TopicPrefix"},
		{"TopicPrefixTooLong", kafkapub.Config{TopicPrefix: strings.Repeat("a", 201)}, "TopicPrefix"},
		{"SourceHasLF", kafkapub.Config{Source: "a\nb"}, "Source"},
		{"SourceTooLong", kafkapub.Config{Source: strings.Repeat("s", 1025)}, "Source"},
		{"UnknownTopicRetriesAbove100", kafkapub.Config{UnknownTopicRetries: 101}, "UnknownTopicRetries"},
		{"UnknownTopicRetriesMinus1", kafkapub.Config{UnknownTopicRetries: -1}, "UnknownTopicRetries"},
		{"UnknownTopicRetriesWithUnlimited", kafkapub.Config{UnknownTopicRetries: 3, UnlimitedUnknownTopicRetries: true}, "UnknownTopicRetries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := kafkapub.NewFromOpts(tc.cfg, kgo.SeedBrokers("127.0.0.1:1"))
			requireConfigError(t, err, tc.option)
			cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
			require.NoError(t, err)
			defer cl.Close()
			_, err = kafkapub.New(cl, tc.cfg)
			requireConfigError(t, err, tc.option)
		})
	}

	t.Run("BadClientOption", func(t *testing.T) {
		t.Parallel()
		// franz-go refuses weaker acks while the idempotent producer is on.
		_, err := kafkapub.NewFromOpts(kafkapub.Config{}, kgo.SeedBrokers("127.0.0.1:1"), kgo.RequiredAcks(kgo.LeaderAck()))
		require.ErrorContains(t, err, "kafkapub: new client")
	})

	t.Run("InRange", func(t *testing.T) {
		t.Parallel()
		p, err := kafkapub.NewFromOpts(kafkapub.Config{
			TopicPrefix: "prod.", PublishTimeout: time.Hour, UnknownTopicRetries: 100,
		}, kgo.SeedBrokers("127.0.0.1:1"))
		require.NoError(t, err)
		p.Close()
	})

	// The client NewFromOpts builds gets 1 by default, the configured
	// count, or franz-go's -1 (until the context ends) for
	// UnlimitedUnknownTopicRetries.
	t.Run("UnknownTopicRetriesReachTheClient", func(t *testing.T) {
		t.Parallel()
		for want, cfg := range map[int64]kafkapub.Config{
			1:  {},
			7:  {UnknownTopicRetries: 7},
			-1: {UnlimitedUnknownTopicRetries: true},
		} {
			p, err := kafkapub.NewFromOpts(cfg, kgo.SeedBrokers("127.0.0.1:1"))
			require.NoError(t, err)
			require.Equal(t, want, p.Client().OptValue(kgo.UnknownTopicRetries), "%+v", cfg)
			p.Close()
		}
	})

	t.Run("NilClient", func(t *testing.T) {
		t.Parallel()
		_, err := kafkapub.New(nil, kafkapub.Config{})
		requireInputError(t, err, "client")
	})

	t.Run("TransactionalClient", func(t *testing.T) {
		t.Parallel()
		_, err := kafkapub.NewFromOpts(kafkapub.Config{}, kgo.SeedBrokers("127.0.0.1:1"), kgo.TransactionalID("tx"))
		requireInputError(t, err, "client")
	})
}

func requireConfigError(t *testing.T, err error, option string) {
	t.Helper()
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, option, ce.Field)
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
}

func requireInputError(t *testing.T, err error, field string) {
	t.Helper()
	var ie *outbox.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, field, ie.Field)
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()

	both := outbox.Event{PartitionKey: "p", AggregateID: "a"}
	aggOnly := outbox.Event{AggregateID: "a"}
	partOnly := outbox.Event{PartitionKey: "p"}
	none := outbox.Event{}

	t.Run("KeyAggregate", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []byte("a"), kafkapub.KeyAggregate(both))
		require.Nil(t, kafkapub.KeyAggregate(partOnly))
	})

	t.Run("KeyPartition", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []byte("p"), kafkapub.KeyPartition(both))
		require.Nil(t, kafkapub.KeyPartition(aggOnly))
	})

	t.Run("KeyPartitionOrAggregate", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []byte("p"), kafkapub.KeyPartitionOrAggregate(both))
		require.Equal(t, []byte("a"), kafkapub.KeyPartitionOrAggregate(aggOnly))
		require.Nil(t, kafkapub.KeyPartitionOrAggregate(none))
	})
}

// timeout returns a context that ends with the test, or a little before
// the run's go test -timeout, with a cause that says so: no fixed cap,
// which a loaded machine could reach (issue 24). The root module's
// internal/testctx does the same; a publisher imports no internal package
// of the core.
func timeout(t *testing.T) context.Context {
	deadline, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	grace := min(time.Minute, time.Until(deadline)/10)
	ctx, cancel := context.WithDeadlineCause(t.Context(), deadline.Add(-grace),
		fmt.Errorf("the go test -timeout of this run ends at %s", deadline.Format(time.TimeOnly)))
	t.Cleanup(cancel)
	return ctx
}
