package lanes

import (
	"context"
	"fmt"
	"testing"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// noopPub acks every message at once.
type noopPub struct{ keyOrdered bool }

func (noopPub) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}

func (p noopPub) PublishesKeysInOrder() bool { return p.keyOrdered }

// BenchmarkLanes publishes 1000-event batches through 16 lanes to a
// publisher that acks at once: the engine's own cost per event, with
// every key distinct, 1000 events over 10 keys (waves of at most 10
// events a lane), the same through a key-ordered publisher (runs), and
// keyless events.
func BenchmarkLanes(b *testing.B) {
	cases := []struct {
		name       string
		keys       int64 // 0: keyless
		keyOrdered bool
	}{
		{"distinct", 1000, false},
		{"keys10", 10, false},
		{"keys10ordered", 10, true},
		{"keyless", 0, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			l, err := New(Config{Publisher: noopPub{keyOrdered: c.keyOrdered}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			evs := events(1, 1000, func(seq int64) string {
				if c.keys == 0 {
					return ""
				}
				return fmt.Sprintf("key-%d", seq%c.keys)
			})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := l.Publish(ctx, evs, nil)
				if err != nil || res.Published != len(evs) {
					b.Fatal(err, res.Published)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		})
	}
}
