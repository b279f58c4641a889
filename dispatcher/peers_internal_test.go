package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/peers"
)

// The Greeter decides whether a hello's mode conflicts by the name a
// hello gives per-key ordering: PerKey's.
func TestHelloNamesPerKeyAsPeersDo(t *testing.T) {
	require.Equal(t, peers.PerKey, PerKey.String())
}
