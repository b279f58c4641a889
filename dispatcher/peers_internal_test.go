package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
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

// lockProbe is a log handler that records whether the peer set's lock was
// held when a line was logged.
type lockProbe struct {
	p      *peerSet
	locked bool
}

func (h *lockProbe) Enabled(context.Context, slog.Level) bool { return true }
func (h *lockProbe) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lockProbe) WithGroup(string) slog.Handler            { return h }
func (h *lockProbe) Handle(context.Context, slog.Record) error {
	if !h.p.mu.TryLock() {
		h.locked = true
		return nil
	}
	h.p.mu.Unlock()
	return nil
}

// The log line of a forgotten replica of another mode is written after the
// peer set's lock is let go: a log handler may call Stats or Health, which
// take it. (Before: forgetSilent logged under the lock, so such a handler
// deadlocked the hello loop.)
func TestForgetSilentLogsWithoutThePeerLock(t *testing.T) {
	d := &Dispatcher{}
	probe := &lockProbe{p: &d.peers}
	d.cfg.Logger = slog.New(probe)
	now := time.Now()
	d.peers.note(hello{ID: "other", Owner: "b", Ordering: "unordered", EveryMS: 1000}, true, now)
	d.forgetSilent(now.Add(time.Hour))
	require.Empty(t, d.peers.peers, "the silent replica is forgotten")
	require.False(t, probe.locked, "logged while holding the peer set's lock")
}
