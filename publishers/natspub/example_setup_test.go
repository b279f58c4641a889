package natspub_test

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// exampleJetStream connects to the tests' NATS server (chosen in
// TestMain) and returns a JetStream context and a function that closes the
// connection.
func exampleJetStream() (jetstream.JetStream, func()) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		panic(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		panic(err)
	}
	return js, nc.Close
}

// exampleStream creates a stream of the example's own on the shared
// server, capturing every subject under the returned prefix ("shop." in a
// service), and returns it and a function that deletes it.
func exampleStream(js jetstream.JetStream) (stream jetstream.Stream, prefix string, drop func()) {
	tag := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	name := "natspub_example_" + tag
	prefix = "natspubexample." + tag + "."
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}})
	if err != nil {
		panic(err)
	}
	return stream, prefix, func() { _ = js.DeleteStream(context.Background(), name) }
}

// exampleEvent is the order.created event the examples publish.
func exampleEvent() outbox.Event {
	return outbox.Event{
		ID:   uuid.MustParse("01938a4e-7c00-7000-8000-000000000001"),
		Type: "order.created", AggregateType: "order", AggregateID: "o-1",
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"total_cents":4200}`),
	}
}

// examplePublish publishes e under prefix on the subject named by its
// type, as a dispatcher with a natspub Publisher would.
func examplePublish(js jetstream.JetStream, prefix string, e outbox.Event) {
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, []outbox.Message{{Destination: e.Type, Event: e}})[0]; err != nil {
		panic(err)
	}
}
