package console_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// shop is the ids of a small outbox as an incident finds it: a history of
// sent events, a backlog with a retried event, one event in flight, and
// dead letters of two codes, one of them holding back its key.
type shop struct {
	// publishFailed are the two payment.captured dead letters of code
	// publish_error.
	publishFailed []uuid.UUID
	// handlerFailed is the invoice.issued dead letter of code
	// handler_error, first of key blockedKey.
	handlerFailed uuid.UUID
}

// The shop's names.
const (
	blockedKey = "order-1042"
	inFlightBy = "billing-7f9c@host-a"
)

// shopCounts are the shop's rows per status.
var shopCounts = map[outbox.Status]int64{
	outbox.StatusPending:    4,
	outbox.StatusProcessing: 1,
	outbox.StatusSent:       10,
	outbox.StatusFailed:     3,
}

// seedShop stores the shop in s's outbox.
func seedShop(t *testing.T, s *site) shop {
	t.Helper()
	trace := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
	var sent []event
	for i, typ := range []string{"order.created", "order.created", "payment.captured", "order.created", "invoice.issued",
		"order.created", "payment.captured", "order.created", "invoice.issued", "payment.captured"} {
		sent = append(sent, event{Status: outbox.StatusSent, Type: typ, ContentType: outbox.ContentTypeJSON, Headers: trace,
			Payload: fmt.Appendf(nil, `{"order":"order-%d"}`, 1000+i), Ago: time.Duration(10-i) * 7 * time.Second})
	}
	s.seed(t, sent...)
	failed := s.seed(t,
		event{Status: outbox.StatusFailed, Type: "payment.captured", Key: "order-1039", Code: outbox.CodePublishError,
			Error: "kafka: broker not available (orders-3)", ContentType: outbox.ContentTypeJSON, Headers: trace,
			Payload: []byte(`{"order":"order-1039","amount":"42.00","currency":"EUR"}`), Ago: 3 * time.Minute},
		event{Status: outbox.StatusFailed, Type: "payment.captured", Key: "order-1040", Code: outbox.CodePublishError,
			Error: "kafka: broker not available (orders-1)", ContentType: outbox.ContentTypeJSON, Headers: trace,
			Payload: []byte(`{"order":"order-1040","amount":"17.50","currency":"EUR"}`), Ago: 2 * time.Minute},
		event{Status: outbox.StatusFailed, Type: "invoice.issued", Key: blockedKey, Code: outbox.CodeHandlerError,
			Error: "invoice template missing", ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"order":"order-1042"}`), Ago: 90 * time.Second},
	)
	s.seed(t,
		event{Type: "invoice.issued", Key: blockedKey, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"order":"order-1042","step":2}`), Ago: time.Minute},
		event{Type: "payment.captured", Key: "order-1043", Code: outbox.CodeTimeout, ContentType: outbox.ContentTypeJSON,
			Payload: []byte(`{"order":"order-1043"}`), Ago: 50 * time.Second},
		event{Type: "order.created", Key: "order-1044", ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"order":"order-1044"}`), Ago: 20 * time.Second},
		event{Type: "order.created", Key: "order-1045", ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"order":"order-1045"}`), Ago: 10 * time.Second},
		event{Status: outbox.StatusProcessing, Type: "order.created", Key: "order-1046", Owner: inFlightBy, ContentType: outbox.ContentTypeJSON,
			Payload: []byte(`{"order":"order-1046"}`), Ago: 5 * time.Second},
	)
	return shop{publishFailed: failed[:2], handlerFailed: failed[2]}
}
