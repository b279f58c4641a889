package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// The order key is PartitionKey, else AggregateID, else none: the database's
// coalesce(partition_key, aggregate_id), since Emit stores "" as NULL.
func TestOrderKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "p", outbox.OrderKey(outbox.Event{PartitionKey: "p", AggregateID: "a"}))
	require.Equal(t, "a", outbox.OrderKey(outbox.Event{AggregateID: "a"}))
	require.Empty(t, outbox.OrderKey(outbox.Event{}))
}
