package amqppub

import (
	"fmt"

	"github.com/pgoutbox/pgoutbox/outbox"
)

var _ outbox.KeyOrderedPublisher = (*Publisher)(nil)

// PublishesKeysInOrder reports Config.KeyOrder: whether Publish keeps the
// order of each outbox.OrderKey within a call, as
// outbox.KeyOrderedPublisher promises. It then sends a key's next message
// only once the broker confirmed the previous one, and stops the key at
// its first failure. A channel's messages reach a queue in the order they
// were published, but RabbitMQ enqueues a message even when an earlier
// one on the channel was returned or nacked (no binding for its routing
// key, a full queue), so pipelining alone would not keep the promise.
// Different keys, and messages without a key, share the window of
// Config.MaxInFlight as before.
func (p *Publisher) PublishesKeysInOrder() bool { return p.cfg.KeyOrder }

// runs returns, for each message of msgs, the index of the next message
// of its order key (or -1), and the messages that start out ready to
// send: the first of each key and every message without a key, in order.
// Without keyOrder every message is ready.
func runs(msgs []outbox.Message, keyOrder bool) (next, ready []int) {
	next = make([]int, len(msgs))
	ready = make([]int, 0, len(msgs))
	var last map[string]int
	if keyOrder {
		last = make(map[string]int)
	}
	for i, m := range msgs {
		next[i] = -1
		key := ""
		if keyOrder {
			key = outbox.OrderKey(m.Event)
		}
		if j, ok := last[key]; ok && key != "" {
			next[j] = i
		} else {
			ready = append(ready, i)
		}
		if key != "" {
			last[key] = i
		}
	}
	return next, ready
}

// settle records err as the outcome of message i: after a success the
// next message of its key becomes ready; after a failure the rest of its
// key is not attempted.
func (b *batch) settle(i int, err error) {
	b.errs[i] = err
	if err != nil {
		b.stop(i)
	} else if j := b.next[i]; j >= 0 {
		b.ready = append(b.ready, j)
	}
}

// stop records every message of i's key after i, none of them sent, as
// not attempted.
func (b *batch) stop(i int) {
	for j := b.next[i]; j >= 0; j = b.next[j] {
		b.errs[j] = &originError{
			context: fmt.Sprintf("amqppub: publish to exchange %q with routing key %q", b.routes[j].Exchange, b.routes[j].RoutingKey),
			err:     outbox.ErrNotAttempted,
		}
	}
}
