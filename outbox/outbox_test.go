package outbox_test

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

func TestTableValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "outbox_events", "_x1", strings.Repeat("a", 63)} {
		require.NoError(t, outbox.Table{Schema: ok}.Validate(), ok)
	}
	for _, bad := range []string{"Outbox", "1abc", "pg_outbox", "a-b", "a b", `a"b`, "été", strings.Repeat("a", 64)} {
		require.ErrorIs(t, outbox.Table{Schema: bad}.Validate(), outbox.ErrInvalidIdentifier, bad)
		require.ErrorIs(t, outbox.Table{Name: bad}.Validate(), outbox.ErrInvalidIdentifier, bad)
	}
}

func TestTableValidateLeavesRoomForSuffixes(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Table{Schema: "s", Name: strings.Repeat("t", 48)}.Validate())
	require.ErrorIs(t, outbox.Table{Schema: "s", Name: strings.Repeat("t", 49)}.Validate(), outbox.ErrInvalidIdentifier)
	require.Equal(t, outbox.Table{Schema: "public", Name: "outbox_events"}, outbox.Table{}.WithDefaults())
}

// TestTableZeroValue checks that a zero Table, and empty names, stand for
// the default table without WithDefaults being called first.
func TestTableZeroValue(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Table{}.Validate())
	require.NoError(t, outbox.Table{Schema: "app"}.Validate())
	require.NoError(t, outbox.Table{Name: "events"}.Validate())
	require.Equal(t, "public.outbox_events", outbox.Table{}.String())
	require.Equal(t, "app.outbox_events", outbox.Table{Schema: "app"}.String())
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := outbox.Backoff{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second, NoJitter: true}.WithDefaults()
	require.NoError(t, b.Validate("Backoff"))
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 10 * time.Second, 10_000: 10 * time.Second} {
		require.Equal(t, want, b.Delay(n), "attempt %d", n)
	}
	j := outbox.Backoff{Initial: time.Second, Jitter: 0.5}.WithDefaults()
	seen := map[time.Duration]bool{}
	for range 200 {
		d := j.Delay(1)
		require.GreaterOrEqual(t, d, 500*time.Millisecond)
		require.LessOrEqual(t, d, 1500*time.Millisecond)
		seen[d] = true
	}
	require.Greater(t, len(seen), 1, "jitter spreads delays")
}

// TestBackoffZeroValue checks that a zero Backoff, and zero fields, act as
// the defaults without WithDefaults being called first.
func TestBackoffZeroValue(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Backoff{}.Validate("B"))
	for range 50 {
		d := outbox.Backoff{}.Delay(1)
		require.GreaterOrEqual(t, d, 900*time.Millisecond)
		require.LessOrEqual(t, d, 1100*time.Millisecond)
	}
	require.Equal(t, 4*time.Second, outbox.Backoff{NoJitter: true}.Delay(3))
	require.Equal(t, time.Hour, outbox.Backoff{NoJitter: true}.Delay(100))
	b := outbox.Backoff{NoJitter: true}.WithDefaults()
	require.Equal(t, b, b.WithDefaults(), "WithDefaults is idempotent")
	require.Zero(t, b.Jitter)
}

// TestBackoffZeroFieldFitsTheOther checks that a zero Max or Initial
// defaults to a value that fits the one given, instead of a default that
// makes the pair invalid.
func TestBackoffZeroFieldFitsTheOther(t *testing.T) {
	t.Parallel()
	long := outbox.Backoff{Initial: 2 * time.Hour, NoJitter: true}
	require.NoError(t, long.Validate("B"))
	require.Equal(t, 2*time.Hour, long.WithDefaults().Max)
	require.Equal(t, 2*time.Hour, long.Delay(5))

	short := outbox.Backoff{Max: 500 * time.Millisecond, NoJitter: true}
	require.NoError(t, short.Validate("B"))
	require.Equal(t, 500*time.Millisecond, short.WithDefaults().Initial)
	require.Equal(t, 500*time.Millisecond, short.Delay(1))

	var ce *outbox.ConfigError
	require.ErrorAs(t, outbox.Backoff{Max: -time.Second}.Validate("B"), &ce)
	require.Equal(t, "B.Max", ce.Field, "a bad Max is named, not the Initial derived from it")
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()
	for field, b := range map[string]outbox.Backoff{
		"B.Initial":    {Initial: time.Microsecond},
		"B.Multiplier": {Multiplier: math.NaN()},
		"B.Max":        {Initial: time.Minute, Max: time.Second},
		"B.Jitter":     {Jitter: 1.5},
	} {
		var ce *outbox.ConfigError
		require.ErrorAs(t, b.Validate("B"), &ce, field)
		require.ErrorAs(t, b.WithDefaults().Validate("B"), &ce, field)
		require.Equal(t, field, ce.Field)
	}
	require.ErrorContains(t, outbox.Backoff{Jitter: -1}.Validate("B"), "set NoJitter")
	require.ErrorContains(t, outbox.Backoff{Jitter: 0.5, NoJitter: true}.Validate("B"), "must be zero when NoJitter is set")
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("no such topic")
	p := outbox.Permanent(base)
	require.True(t, outbox.IsPermanent(p))
	require.True(t, outbox.IsPermanent(errors.Join(errors.New("x"), p)))
	require.ErrorIs(t, p, base)
	require.False(t, outbox.IsPermanent(base))
	require.NoError(t, outbox.Permanent(nil))
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	base := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	u := outbox.Unavailable(fmt.Errorf("publish: %w", base))
	require.ErrorIs(t, u, outbox.ErrUnavailable)
	require.True(t, outbox.IsUnavailable(u))
	require.True(t, outbox.IsUnavailable(errors.Join(errors.New("x"), u)))
	var op *net.OpError
	require.ErrorAs(t, u, &op, "the cause stays visible")
	require.Contains(t, u.Error(), "connection refused")
	require.False(t, outbox.IsUnavailable(base))
	require.False(t, outbox.IsUnavailable(outbox.Permanent(u)), "permanent wins")
	require.False(t, outbox.IsUnavailable(outbox.Unavailable(outbox.Permanent(base))), "permanent wins")
	require.NoError(t, outbox.Unavailable(nil))
}

func TestNewJSON(t *testing.T) {
	t.Parallel()
	e, err := outbox.NewJSON("order.created", map[string]int{"total": 5})
	require.NoError(t, err)
	require.Equal(t, "order.created", e.Type)
	require.Equal(t, outbox.ContentTypeJSON, e.ContentType)
	require.JSONEq(t, `{"total":5}`, string(e.Payload))

	_, err = outbox.NewJSON("x", func() {})
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	_, err = outbox.NewJSON("x", math.Inf(1))
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.NotContains(t, err.Error(), "Inf", "the error does not quote the value")
}

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, s := range outbox.Statuses() {
		require.True(t, s.Valid())
	}
	require.False(t, outbox.Status("DONE").Valid())
}

func TestErrorTexts(t *testing.T) {
	t.Parallel()
	ve := &outbox.ValidationError{Index: 2, Field: "Type", Reason: "is empty"}
	require.Equal(t, "pgoutbox: invalid event 2: Type is empty", ve.Error())
	require.ErrorIs(t, ve, outbox.ErrInvalidEvent)
	ce := &outbox.ConfigError{Field: "BatchSize", Reason: "must be between 1 and 10000"}
	require.ErrorIs(t, ce, outbox.ErrInvalidConfig)
	require.Equal(t, "pgoutbox: invalid configuration: BatchSize must be between 1 and 10000", ce.Error())
	ie := &outbox.InputError{Field: "tx", Reason: "is nil", Err: outbox.ErrTxDone}
	require.Equal(t, "pgoutbox: invalid input: tx is nil: transaction cannot be used", ie.Error(), "one prefix, not the cause's too")
	te := outbox.Table{Name: "Bad"}.Validate()
	require.ErrorIs(t, te, outbox.ErrInvalidIdentifier)
	require.Equal(t, `pgoutbox: invalid identifier: table "Bad" may hold only a-z, 0-9 and _`, te.Error())
}

// TestErrorShape checks that the three typed errors share one shape: a
// Field, one Unwrap giving the kind's sentinel and the cause, and no
// kind matching another's sentinel.
func TestErrorShape(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	kinds := []error{outbox.ErrInvalidEvent, outbox.ErrInvalidConfig, outbox.ErrInvalidInput}
	for i, err := range []error{
		&outbox.ValidationError{Index: 0, Field: "F", Reason: "r", Err: cause},
		&outbox.ConfigError{Field: "F", Reason: "r", Err: cause},
		&outbox.InputError{Field: "F", Reason: "r", Err: cause},
	} {
		wrapped := fmt.Errorf("outer: %w", err)
		require.ErrorIs(t, wrapped, cause)
		for j, kind := range kinds {
			require.Equal(t, i == j, errors.Is(wrapped, kind), "%T and %v", err, kind)
		}
		require.Equal(t, []error{kinds[i], cause}, err.(interface{ Unwrap() []error }).Unwrap())
	}
	require.Equal(t, []error{outbox.ErrInvalidInput}, (&outbox.InputError{Field: "F"}).Unwrap())
}

func TestHeaderRule(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "X-Trace-Id", "traceparent", "!#$%&'*+-.^_`|~09AZaz", "Pgoutbox-Event-Id", "nats", "ce", "content", "Content-Length"} {
		require.Empty(t, outbox.HeaderNameProblem(ok), ok)
	}
	for _, bad := range []string{"", "x/y", "a:b", "has space", "héader", "a\tb", "a\x7f", "a\x00", "(x)", "a,b",
		"ce_id", "CE_Type", "ce-id", "Ce-Source", "content-type", "Content-Type", "Nats-Msg-Id", "nats-rollup", "cloudEvents_id", "CLOUDEVENTS_type", "CC", "bcc"} {
		require.NotEmpty(t, outbox.HeaderNameProblem(bad), "%q", bad)
	}
	for _, ok := range []string{"", "v", "a  b", "a\tb", "\x01c\x7f", "\u00a0nbsp\u00a0", "\vv\f", "日本語 ✓", ": a: b", `"q"`} {
		require.Empty(t, outbox.HeaderValueProblem(ok), "%q", ok)
	}
	for bad, reason := range map[string]string{
		" v": "starts or ends with a space or a tab", "v ": "starts or ends with a space or a tab",
		"\tv": "starts or ends with a space or a tab", " ": "starts or ends with a space or a tab",
		"a\nb": "contains CR or LF", "key-1\r\n": "contains CR or LF", "a\rb": "contains CR or LF",
		"a\x00b": "contains a NUL byte", "a\xffb": "is not valid UTF-8",
	} {
		require.Equal(t, reason, outbox.HeaderValueProblem(bad), "%q", bad)
	}

	e := outbox.Event{Type: "t", AggregateID: "id", Headers: map[string]string{"x-empty": "", "x": "SECRET"}}
	field, reason := outbox.HeaderProblem(e)
	require.Empty(t, field+reason)
	for name, edit := range map[string]func(*outbox.Event){
		"Type":           func(e *outbox.Event) { e.Type = "order\ncreated" },
		"AggregateType":  func(e *outbox.Event) { e.AggregateType = "a\rb" },
		"AggregateID":    func(e *outbox.Event) { e.AggregateID = " agg-2 " },
		"PartitionKey":   func(e *outbox.Event) { e.PartitionKey = "k\t" },
		"IdempotencyKey": func(e *outbox.Event) { e.IdempotencyKey = "key-1\r\n" },
		"ContentType":    func(e *outbox.Event) { e.ContentType = " text/plain" },
		"Headers":        func(e *outbox.Event) { e.Headers = map[string]string{"x": "  SECRET  "} },
	} {
		bad := e
		edit(&bad)
		field, reason := outbox.HeaderProblem(bad)
		require.Equal(t, name, field)
		require.NotEmpty(t, reason)
		require.NotContains(t, reason, "SECRET")
	}
	for _, c := range outboxtest.HeaderCases() {
		field, _ := outbox.HeaderProblem(c.Event)
		require.Equal(t, c.Field, field, c.Name)
	}
	field, reason = outbox.HeaderProblem(outbox.Event{Type: "t", Headers: map[string]string{"x/y": "v"}})
	require.Equal(t, "Headers", field)
	require.Equal(t, `name "x/y" holds '/' at byte 1; a header name holds only ASCII letters, digits and !#$%&'*+-.^_`+"`|~", reason)
}
