package outbox_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestEventFormatHidesPayloadAndHeaderValues: no fmt verb, no slog
// handler and no struct holding an event prints its payload, its header
// values or its header-borne keys; its identity still shows.
func TestEventFormatHidesPayloadAndHeaderValues(t *testing.T) {
	e := outbox.Event{ID: uuid.New(), Type: "order.created", ContentType: "text/plain",
		Payload: []byte("secret-payload"), Headers: map[string]string{"X-Card": "secret-header"},
		AggregateID: "secret-aggregate", PartitionKey: "secret-partition", IdempotencyKey: "secret-idem"}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("m", "event", e)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("m", "event", e)
	outputs := []string{logged.String(), fmt.Sprint(e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e),
		fmt.Sprintf("%s", e), fmt.Sprintf("%v", &e), fmt.Sprintf("%+v", outbox.Message{Destination: "d", Event: e}),
		fmt.Errorf("handler panic: %v", e).Error()}
	for _, out := range outputs {
		if strings.Contains(out, "secret") || strings.Contains(out, "115 101 99") { // "sec" as fmt prints []byte
			t.Errorf("an event's data leaked: %s", out)
		}
		if !strings.Contains(out, e.ID.String()) || !strings.Contains(out, "X-Card") {
			t.Errorf("an event printed without its id or header names: %s", out)
		}
	}
}
