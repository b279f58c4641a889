package dispatcher_test

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// printPublisher stands in for kafkapub or natspub: it prints what a broker
// would receive and acknowledges every message.
type printPublisher struct{}

func (printPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	for _, m := range msgs {
		fmt.Printf("publish %s (key %s) to %s\n", m.Event.Type, m.Event.AggregateID, m.Destination)
	}
	return make([]error, len(msgs)) // all nil: acknowledged
}

// A dispatcher that relays events to a broker: every event the router gives
// a destination is published, after its local handler (if any) succeeded.
func ExampleNew_publisher() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	exampleEmit(ctx, pool, table, "o-1")

	sent := make(chan dispatcher.Outcome, 1)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:     table,
		Publisher: printPublisher{}, // e.g. kafkapub.New(client, kafkapub.Config{})
		RouteFunc: func(e outbox.Event) string { return "shop." + e.Type },
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) { sent <- o },
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = d.Stop(ctx) }()

	fmt.Println((<-sent).Status)
	// Output:
	// publish order.created (key o-1) to shop.order.created
	// SENT
}
