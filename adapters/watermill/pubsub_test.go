package pgwatermill_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// suiteDispatcher is the dispatcher configuration of the universal suite's
// subscribers: Watermill's Nack means "deliver again", and the suite
// nacks one message up to 300 times (TestContinueAfterErrors), so the
// retry budget is large and the backoff short; retries are found by a
// poll, hence a short PollInterval.
func suiteDispatcher(db testDB, ordering dispatcher.Ordering) dispatcher.Config {
	return dispatcher.Config{
		Table:        db.Table,
		Ordering:     ordering,
		PollInterval: 50 * time.Millisecond,
		MaxAttempts:  1000,
		Backoff:      outbox.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, NoJitter: true},
		Logger:       quietLogger,
	}
}

// TestPubSub runs Watermill's universal Pub/Sub suite with the default,
// unordered dispatcher. Features, honestly: no consumer groups (every
// subscriber of a topic shares its events, each delivered once, not once
// per group), at-least-once (not exactly-once), no guaranteed order,
// persistent (events are rows), no broker to restart. Publishing uses
// NewEventIDs, since the suite publishes one message twice and expects
// both (TestMessageCtx); with the default IDs the second is refused as a
// duplicate, see TestPublishSameUUIDTwice.
func TestPubSub(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	features := tests.Features{Persistent: true}
	tests.TestPubSub(t, features, suiteConstructor(db, dispatcher.Unordered, nil), nil)
}

// TestPubSubOrdered runs the suite again where the order is guaranteed:
// a dispatcher with Ordering PerKey over an outbox with the order index,
// and a publisher that gives every message of a topic the topic as its
// order key. Messages are handed out one at a time per topic, each after
// the previous one was acknowledged (TestNoAck runs here). ForceShort: one
// order key is delivered serially, and the full counts (5,000 messages to
// 50 competing subscribers in TestConcurrentSubscribe, 10,000 in
// TestPublisherClose) took over 10 minutes with -race on 2 cores.
func TestPubSubOrdered(t *testing.T) {
	t.Parallel()
	db := newDB(t, true)
	features := tests.Features{Persistent: true, GuaranteedOrder: true, ForceShort: true}
	topicKey := func(p pgwatermill.OrderKeyParams) string { return p.Topic }
	tests.TestPubSub(t, features, suiteConstructor(db, dispatcher.PerKey, topicKey), nil)
}

func suiteConstructor(db testDB, ordering dispatcher.Ordering, key func(pgwatermill.OrderKeyParams) string) tests.PubSubConstructor {
	return func(t *testing.T) (message.Publisher, message.Subscriber) {
		t.Helper()
		pub, err := pgwatermill.NewPublisher(db.Pool, pgwatermill.PublisherConfig{
			Emitter: emitterConfig(db), NewEventIDs: true, OrderKeyFunc: key,
		})
		require.NoError(t, err)
		sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{Dispatcher: suiteDispatcher(db, ordering)})
		require.NoError(t, err)
		// The suite leaves some subscribers open; close them before the
		// schema is dropped.
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		return pub, sub
	}
}
