package amqppub_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// TestKeyOrder: with KeyOrder, after a key's message fails (here
// unroutable) the rest of that key is not attempted, while other keys
// carry on; without it, the later message of the key is published.
func TestKeyOrder(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	for _, keyOrder := range []bool{true, false} {
		x := a.exchange(t)
		q := a.queue(t, x, "ok", nil)
		p := newPublisher(t, amqppub.Config{Exchange: x, KeyOrder: keyOrder})
		require.Equal(t, keyOrder, p.PublishesKeysInOrder())
		msgs := messages("ok", 4)
		for i, key := range []string{"A", "A", "A", "B"} {
			msgs[i].Event.PartitionKey = key
		}
		msgs[1].Destination = "nobody"
		errs := p.Publish(runContext(t), msgs)
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], amqppub.ErrUnroutable)
		require.NoError(t, errs[3])
		if keyOrder {
			require.ErrorIs(t, errs[2], outbox.ErrNotAttempted)
			require.ErrorContains(t, errs[2], `routing key "ok"`)
			require.Equal(t, 2, depth(t, a, q))
		} else {
			require.NoError(t, errs[2])
			require.Equal(t, 3, depth(t, a, q))
		}
	}
}
