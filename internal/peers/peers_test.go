package peers

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Anyone who may NOTIFY on the table's channel can send hellos: the peers
// a dispatcher keeps are bounded in number, and a hello cannot make itself
// remembered for longer than the longest hello interval a dispatcher has.
// (Before: each new hello ID was kept, and a hello with a huge every_ms was
// never forgotten, so a flood of hellos grew the set without bound.)
func TestPeersAreBoundedAgainstForgedHellos(t *testing.T) {
	var p Set
	now := time.Now()
	for i := range 10 * MaxPeers {
		h := Hello{Table: "public.outbox_events", ID: fmt.Sprintf("forged-%d", i), Ordering: "unordered", EveryMS: 1 << 60}
		p.Note(h, true, now)
	}
	require.LessOrEqual(t, len(p.peers), MaxPeers, "peers kept")

	forged := Hello{ID: "x", EveryMS: 1 << 60}
	require.LessOrEqual(t, SilentAfter(forged), 3*MaxHelloEvery, "how long a forged hello is remembered")
}
