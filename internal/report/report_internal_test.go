package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/loglimit"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// logBundle is a reporter whose log is kept as JSON lines and whose
// limiter reads a clock the test moves.
type logBundle struct {
	r   *Reporter
	buf bytes.Buffer
	at  time.Time
	err int // errors passed to OnError
}

func newLogBundle(t *testing.T) *logBundle {
	t.Helper()
	b := &logBundle{at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	logger := slog.New(slog.NewJSONHandler(&b.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.r = New(Config{Logger: logger, Owner: "o", OnError: func(error) { b.err++ }, Table: "public.outbox_events",
		MeterProvider: otel.GetMeterProvider(), TracerProvider: otel.GetTracerProvider(), PublishCode: publishCode,
		Clock: clock.NewAll(func() time.Time { return b.at })})
	return b
}

// lines returns the log lines written since the last call, decoded.
func (b *logBundle) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		out = append(out, m)
	}
	b.buf.Reset()
	return out
}

// Lost leases of many events are logged at WARN once per interval, naming
// the first event; OnError sees every one; the held-back lines are
// summarised with their count once the interval has passed, even when no
// line follows them, and only once.
func TestLogRepeatsSummarised(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	for _, id := range ids {
		b.r.Lost(id)
	}
	require.Equal(t, 5, b.err)
	lines := b.lines(t)
	require.Len(t, lines, 1)
	require.Equal(t, "WARN", lines[0]["level"])
	require.Equal(t, ids[0].String(), lines[0]["event_id"])
	require.Contains(t, lines[0]["msg"], "lease lost")
	require.Contains(t, lines[0]["error"], "pgoutbox: lease lost: event "+ids[0].String())

	b.at = b.at.Add(loglimit.Interval / 2)
	b.r.FlushRepeats()
	require.Empty(t, b.lines(t), "no summary before the interval has passed")

	b.at = b.at.Add(loglimit.Interval / 2)
	b.r.FlushRepeats()
	lines = b.lines(t)
	require.Len(t, lines, 1)
	require.Equal(t, "pgoutbox: similar lines suppressed", lines[0]["msg"])
	require.Contains(t, lines[0]["message"], "lease lost")
	require.Equal(t, "WARN", lines[0]["level"])
	require.InDelta(t, 4, lines[0]["repeats_not_logged"], 0)
	require.NotContains(t, lines[0], "event_id", "a summary names no single event")

	b.at = b.at.Add(2 * loglimit.Interval)
	b.r.FlushRepeats()
	require.Empty(t, b.lines(t), "a count is summarised once")
	b.r.Lost(ids[0])
	lines = b.lines(t)
	require.Len(t, lines, 1)
	require.NotContains(t, lines[0], "repeats_not_logged")
}

// A line that keeps coming (a retry every 3s, the coordinator's poll every
// 1s) is not replaced by summaries: a full line, carrying the count held
// back and the latest error text, comes once per interval.
func TestContinuingRepeatsStillLogLines(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	var full, summaries int
	var lastErr, lastRepeats any
	for i := range 120 { // half-second steps: 60s
		text := "connection refused"
		if i >= 10 {
			text = "HTTP 500"
		}
		if i%6 == 0 { // a retry every 3s
			b.r.Retry(&outbox.Event{ID: uuid.New(), Type: "a", Attempt: 2}, outbox.CodeHandlerError, time.Time{},
				errors.New(text), false)
		}
		if i%2 == 1 { // the coordinator's poll, every 1s
			b.r.FlushRepeats()
		}
		for _, l := range b.lines(t) {
			if l["msg"] == "pgoutbox: similar lines suppressed" {
				summaries++
			} else {
				full++
				lastErr, lastRepeats = l["error"], l["repeats_not_logged"]
			}
		}
		b.at = b.at.Add(time.Second / 2)
	}
	require.GreaterOrEqual(t, full, 5, "about one full line per 10s")
	require.Zero(t, summaries, "the line never went quiet")
	require.Equal(t, "HTTP 500", lastErr)
	require.InDelta(t, 3, lastRepeats, 0, "the retries at +3s, +6s and +9s")
}

// When Run ends, every count of held-back lines is summarised, however
// recent: no line follows.
func TestEndOfRunSummarisesEveryCount(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	for range 50 {
		b.r.Lost(uuid.New())
	}
	require.Len(t, b.lines(t), 1)
	b.at = b.at.Add(time.Second)
	b.r.FlushAllRepeats()
	lines := b.lines(t)
	require.Len(t, lines, 1, "the 49 held-back lost leases are summarised when Run ends")
	require.Equal(t, "pgoutbox: similar lines suppressed", lines[0]["msg"])
	require.InDelta(t, 49, lines[0]["repeats_not_logged"], 0)
	b.r.FlushAllRepeats()
	require.Empty(t, b.lines(t), "a count is summarised once")
}

// A handler's error is logged as the bounded text the row stores, in the
// lines of a retry, a FAILED event and a panic.
func TestLoggedErrorTextBounded(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	long := errors.New(strings.Repeat("é", 5000))
	e := &outbox.Event{ID: uuid.New(), Type: "a", Attempt: 2}
	b.r.Retry(e, outbox.CodeHandlerError, time.Time{}, long, false)
	b.r.Failed(e, outbox.CodeHandlerError, long)
	b.r.Panic("handler", "a", e.ID, long)
	lines := b.lines(t)
	require.Len(t, lines, 3)
	for _, l := range lines {
		require.Equal(t, lease.CleanMessage(long.Error()), l["error"], l["msg"])
		require.LessOrEqual(t, len(l["error"].(string)), 2048)
	}
	require.Contains(t, lines[2]["stack"], "(*Reporter).Panic", "the panic line has the stack")
}

// Making room in the limiter never drops a count of held-back lines
// unsummarised: a count due for a summary is summarised, and one not yet
// due is kept (or summarised) rather than forgotten.
func TestLimiterEvictionKeepsCounts(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	summarised := map[string]float64{}
	collect := func() {
		for _, l := range b.lines(t) {
			if l["msg"] == "pgoutbox: similar lines suppressed" {
				summarised[l["message"].(string)] += l["repeats_not_logged"].(float64)
			}
		}
	}
	for range 3 {
		b.r.Error("quiet", errors.New("x"))
	}
	b.at = b.at.Add(loglimit.Interval)
	for range 3 {
		b.r.Error("recent", errors.New("x"))
	}
	for i := range loglimit.MaxLines + 1 {
		b.r.Error("distinct", fmt.Errorf("error %d", i))
	}
	collect()
	require.InDelta(t, 2, summarised["pgoutbox: quiet"], 0, "the due count is summarised when room is made")
	b.r.FlushAllRepeats()
	collect()
	require.InDelta(t, 2, summarised["pgoutbox: recent"], 0, "the count not yet due is not lost")
}

// Retries are logged at INFO (snoozes at DEBUG) once per interval for each
// event type and code, with the event's id, attempt and error; a line
// logged after repeats counts them.
func TestRetriesLoggedAtBoundedRate(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	retry := func(typ string, code outbox.Code, snooze bool) {
		b.r.Retry(&outbox.Event{ID: uuid.New(), Type: typ, Attempt: 2}, code, time.Time{},
			errors.New("handler said no"), snooze)
	}
	for range 3 {
		retry("a", outbox.CodeHandlerError, false)
		retry("a", outbox.CodeTimeout, false)
		retry("b", outbox.CodeHandlerError, false)
		retry("a", outbox.CodeHandlerError, true)
	}
	lines := b.lines(t)
	require.Len(t, lines, 4, "one line per type and code (and one for snoozes)")
	levels := map[string]int{}
	for _, l := range lines {
		levels[l["level"].(string)]++
		require.Contains(t, l, "event_id")
		require.Equal(t, "handler said no", l["error"])
	}
	require.Equal(t, map[string]int{"INFO": 3, "DEBUG": 1}, levels)

	b.at = b.at.Add(loglimit.Interval)
	retry("a", outbox.CodeHandlerError, false)
	lines = b.lines(t)
	require.Len(t, lines, 1)
	require.InDelta(t, 2, lines[0]["repeats_not_logged"], 0)
}

// A recovery is logged at WARN with its counts and at most MaxLoggedIDs
// ids of each kind.
func TestRecoveryLogged(t *testing.T) {
	t.Parallel()
	b := newLogBundle(t)
	b.r.Recovered(lease.RecoverResult{})
	require.Empty(t, b.lines(t), "a recovery that found nothing is not logged")

	res := lease.RecoverResult{Failed: []outbox.Event{{ID: uuid.New()}}}
	for range MaxLoggedIDs + 5 {
		res.Pending = append(res.Pending, uuid.New())
	}
	b.r.Recovered(res)
	lines := b.lines(t)
	require.Len(t, lines, 1)
	require.Equal(t, "WARN", lines[0]["level"])
	require.InDelta(t, MaxLoggedIDs+5, lines[0]["pending"], 0)
	require.Len(t, lines[0]["pending_ids"], MaxLoggedIDs+1, "the first ids and a mark for the rest")
	require.Equal(t, "…", lines[0]["pending_ids"].([]any)[MaxLoggedIDs])
	require.InDelta(t, 1, lines[0]["failed_worker_lost"], 0)
	require.Equal(t, []any{res.Failed[0].ID.String()}, lines[0]["failed_ids"])
}

// publishCode is the tests' code of a failed publish.
func publishCode(error) outbox.Code { return outbox.CodePublishError }
