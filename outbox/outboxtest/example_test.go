package outboxtest_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

// broker stands for a client of the broker a publisher under test sends
// to, connected in the test's TestMain.
var broker interface {
	NewPublisher() outbox.Publisher
	CreateTopic(name string) error
	// Read waits for n messages on topic and decodes them with the
	// publisher's own decoder.
	Read(ctx context.Context, topic string, n int) []outboxtest.Received
}

// The conformance suite run against a publisher of one's own, in a test of
// its package (func TestConformance(t *testing.T)). The harness gives the
// suite fresh destinations and reads back what arrived; Features claims
// what the broker can do, and the suite checks each claim.
func ExampleRunPublisherSuite() {
	var t *testing.T // TestConformance's
	outboxtest.RunPublisherSuite(t, outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher { return broker.NewPublisher() },
		NewDestination: func(t *testing.T) string {
			topic := "conformance-" + uuid.NewString()
			if err := broker.CreateTopic(topic); err != nil {
				t.Fatal(err)
			}
			return topic
		},
		MissingDestination: func(t *testing.T) string { return "missing-" + uuid.NewString() },
		Receive: func(ctx context.Context, t *testing.T, dest string, n int) []outboxtest.Received {
			return broker.Read(ctx, dest, n)
		},
	}, outboxtest.Features{KeyOrder: true})
}
