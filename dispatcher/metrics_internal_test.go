package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testTraceparent is a W3C traceparent header, sampled.
const testTraceparent = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"

// BenchmarkInstrumentsNoProvider measures what the metrics and spans add
// to one event's dispatch when the application installed no provider (the
// global ones by default): the handler's span and measurements, and the
// counting of its outcome, for an event without and with a traceparent
// header (which is not read then). Compare it with
// BenchmarkDispatchInProcess's ns/event.
//
//	go test -run '^$' -bench InstrumentsNoProvider -benchmem ./dispatcher/
func BenchmarkInstrumentsNoProvider(b *testing.B) {
	d := offlineDispatcher(b, Config{})
	for _, bc := range []struct {
		name    string
		headers map[string]string
	}{{"plain", nil}, {"traceparent", map[string]string{"traceparent": testTraceparent}}} {
		b.Run(bc.name, func(b *testing.B) {
			it := begunItem(b, &outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Attempt: 1, CreatedAt: time.Now(),
				Headers: bc.headers}, false)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d.report.Metrics().Started(it.Event, it.Suspect, time.Now())
				_, span := d.report.Spans().HandlerSpan(ctx, it.Event)
				d.report.Metrics().Handled(it.Event.Type, it.StartedAt(), 0, "")
				report.EndHandlerSpan(span, nil, "") // a handler call that succeeded
				d.report.Metrics().Completed(it.Event.Type, outbox.StatusSent, false, "")
				d.report.Counters.Claimed.Add(1)
			}
		})
	}
}
