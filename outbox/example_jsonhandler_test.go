package outbox_test

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/outbox"
)

type orderCreated struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total_cents"`
}

// A handler that receives its payload decoded. A payload that does not
// decode fails the event at once (outbox.Permanent): no retry can fix it.
func ExampleJSONHandler() {
	h := outbox.JSONHandler(func(ctx context.Context, e outbox.Event, o orderCreated) error {
		fmt.Printf("order %s: %d cents\n", o.OrderID, o.Total)
		return nil
	})
	// d.Handle("order.created", h) registers it with a dispatcher.

	_ = h(context.Background(), outbox.Event{Payload: []byte(`{"order_id":"o-1","total_cents":4200}`)})
	err := h(context.Background(), outbox.Event{Payload: []byte(`{"order_id":42}`)})
	fmt.Println(outbox.IsPermanent(err))
	// Output:
	// order o-1: 4200 cents
	// true
}
