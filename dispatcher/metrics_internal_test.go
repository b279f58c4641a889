package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/outbox"
)

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
	}{{"plain", nil}, {"traceparent", map[string]string{traceparent: testTraceparent}}} {
		b.Run(bc.name, func(b *testing.B) {
			it := &item{event: &outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Attempt: 1, CreatedAt: time.Now(),
				Headers: bc.headers}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				it.startedAt = time.Now()
				d.metrics.started(it)
				_, span := d.spans.handlerSpan(ctx, it.event)
				d.metrics.handled(it, result{})
				endHandlerSpan(span, result{})
				d.metrics.completed(it, outbox.StatusSent)
				d.stats.claimed.Add(1)
			}
		})
	}
}
