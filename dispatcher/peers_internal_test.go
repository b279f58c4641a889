package dispatcher

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/peers"
)

// lockProbe is a log handler that takes the peer set's lock when a line is
// logged (through Conflicts, as Health does): had the line been logged
// under that lock, the test would deadlock there instead of reaching
// logged.
type lockProbe struct {
	p      *peers.Set
	logged bool
}

func (h *lockProbe) Enabled(context.Context, slog.Level) bool { return true }
func (h *lockProbe) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lockProbe) WithGroup(string) slog.Handler            { return h }
func (h *lockProbe) Handle(context.Context, slog.Record) error {
	h.p.Conflicts(time.Now()) // blocks for good if the lock is held
	h.logged = true
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
	d.peers.Note(peers.Hello{ID: "other", Owner: "b", Ordering: "unordered", EveryMS: 1000}, true, now)
	d.forgetSilent(now.Add(time.Hour))
	conflicts, _ := d.peers.Conflicts(now) // heard within its interval, were it kept
	require.Empty(t, conflicts, "the silent replica is forgotten")
	require.True(t, probe.logged, "logged, not while holding the peer set's lock")
}
