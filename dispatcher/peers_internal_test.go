package dispatcher

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
	var p peerSet
	now := time.Now()
	for i := range 10 * peersMax {
		h := hello{Table: "public.outbox_events", ID: fmt.Sprintf("forged-%d", i), Ordering: "unordered", EveryMS: 1 << 60}
		p.note(h, true, now)
	}
	require.LessOrEqual(t, len(p.peers), peersMax, "peers kept")

	forged := hello{ID: "x", EveryMS: 1 << 60}
	require.LessOrEqual(t, silentAfter(forged), 3*helloEveryMax, "how long a forged hello is remembered")
}
