package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestOrderKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		partitionKey, aggregateID, want string
	}{
		{"p", "a", "p"},
		{"", "a", "a"},
		{"p", "", "p"},
		{"", "", ""},
	} {
		e := outbox.Event{PartitionKey: tc.partitionKey, AggregateID: tc.aggregateID}
		require.Equal(t, tc.want, outbox.OrderKey(e), "%+v", tc)
	}
}
