package peers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/report"
)

// lockProbe is a log handler that takes the peer set's lock when a line is
// logged (through Conflicts, as Health does): had the line been logged
// under that lock, the test would deadlock there instead of reaching
// logged.
type lockProbe struct {
	p      *Set
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
	g := &Greeter{}
	probe := &lockProbe{p: &g.peers}
	g.cfg.Logger = slog.New(probe)
	now := time.Now()
	g.peers.Note(Hello{ID: "other", Owner: "b", Ordering: "unordered", EveryMS: 1000}, true, now)
	g.forgetSilent(now.Add(time.Hour))
	conflicts, _ := g.peers.Conflicts(now) // heard within its interval, were it kept
	require.Empty(t, conflicts, "the silent replica is forgotten")
	require.True(t, probe.logged, "logged, not while holding the peer set's lock")
}

// A hello of another Ordering conflicts; under per-key, so does one of
// another HeadPolicy or OrderScope, which unordered dispatchers ignore.
func TestConflictsRule(t *testing.T) {
	perKey := Hello{Ordering: PerKey, HeadPolicy: "block-key", OrderScope: "key"}
	unordered := Hello{Ordering: "unordered", HeadPolicy: "block-key", OrderScope: "key"}
	require.False(t, conflicts(perKey, perKey))
	require.True(t, conflicts(perKey, unordered))
	require.True(t, conflicts(unordered, perKey))
	otherHead, otherScope := perKey, perKey
	otherHead.HeadPolicy, otherScope.OrderScope = "skip-key", "table"
	require.True(t, conflicts(perKey, otherHead))
	require.True(t, conflicts(perKey, otherScope))
	unorderedOther := unordered
	unorderedOther.HeadPolicy, unorderedOther.OrderScope = "skip-key", "table"
	require.False(t, conflicts(unordered, unorderedOther))
}

// countHandler counts the log lines at WARN.
type countHandler struct{ warns int }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countHandler) WithGroup(string) slog.Handler            { return h }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.warns++
	}
	return nil
}

// A notification that is not a hello is a wake-up; a hello of another
// mode (an answer: nothing is sent back) is logged once and reported,
// one of this dispatcher's own or of another table is not.
func TestNotified(t *testing.T) {
	logs := &countHandler{}
	triggers := 0
	g := New(Config{
		Me:    Hello{Table: "public.outbox_events", Owner: "a", Ordering: PerKey, HeadPolicy: "block-key", OrderScope: "key"},
		Every: time.Second, Logger: slog.New(logs), Report: report.New(report.Config{Logger: slog.New(logs), MeterProvider: otel.GetMeterProvider(), TracerProvider: otel.GetTracerProvider()}),
		Trigger: func() { triggers++ }, Clock: clock.Real(),
	})
	g.Notified(context.Background(), "")
	require.Equal(t, 1, triggers, "a wake-up")
	require.Equal(t, uint64(1), g.cfg.Report.Counters.Wakeups.Load())

	other := Prefix + `{"table":"public.outbox_events","id":"b1","owner":"b","ordering":"unordered","every_ms":1000,"answer":true}`
	g.Notified(context.Background(), other)
	g.Notified(context.Background(), other)
	g.Notified(context.Background(), Prefix+`{"table":"public.other","id":"c1","owner":"c","ordering":"unordered","answer":true}`)
	g.Notified(context.Background(), Prefix+`{"table":"public.outbox_events","id":"`+g.cfg.Me.ID+`","ordering":"unordered"}`)
	conflicts, hellos := g.Conflicts()
	require.Len(t, conflicts, 1)
	require.Equal(t, "b", conflicts[0].Owner)
	require.Equal(t, uint64(2), hellos, "hellos of other dispatchers of the table")
	require.Equal(t, 1, logs.warns, "one WARN per replica")
	require.Equal(t, 1, triggers, "a hello wakes no claim")
}
