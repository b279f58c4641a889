package emitter

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Defaults of the Config limits.
const (
	// DefaultMaxPayloadBytes is the default payload limit: 900 KiB
	// (921,600 bytes). The default message limits of the brokers count
	// more than the payload: NATS's max_payload (1 MiB) counts the
	// headers too, and franz-go's batch limit (1,000,012 bytes, below
	// Kafka's max.message.bytes) the record's key and headers. 900 KiB
	// leaves room for them: with the default header limits below, an
	// event Emit accepts fits both brokers' defaults as natspub and
	// kafkapub send it (its headers take at most about 32 KiB there). A
	// larger limit needs the brokers' limits raised to match.
	DefaultMaxPayloadBytes = 900 << 10
	// DefaultMaxHeaders is the default limit on the number of headers of
	// one event.
	DefaultMaxHeaders = 64
	// DefaultMaxHeaderBytes is the default limit on the total bytes of the
	// header names and values of one event: 16 KiB.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultNotifyInterval is the default least time between two Emit
	// calls that notify.
	DefaultNotifyInterval = 20 * time.Millisecond
)

// Largest limits New accepts.
const (
	payloadLimit     = 64 << 20 // MaxPayloadBytes: 64 MiB
	headerCountLimit = 1024     // MaxHeaders
	headerBytesLimit = 1 << 20  // MaxHeaderBytes: 1 MiB
)

// Config configures an Emitter. The zero value is usable: it emits into
// public.outbox_events and wakes dispatchers with pg_notify. A zero field
// means its default; the special settings have fields of their own
// (NotifyEveryEmit, NoHeaders), never a magic number.
type Config struct {
	// Table is the outbox table events are inserted into. Defaults to
	// public.outbox_events; see [outbox.Table] for the names it accepts.
	Table outbox.Table
	// Kind says what Table is: outbox.KindOutbox (the default), the
	// dispatcher's outbox table, or outbox.KindLog, the relay's
	// append-only log (migrations.Config.Kind). The kind is declared, not
	// discovered: Emit has only the caller's transaction, and a catalog
	// read per call would cost the writer; migrations.Verify and the
	// relay's start check catch a mismatch. Into a log, Emit writes the
	// same columns minus the due time (xid, seq and created_at come from
	// the log's defaults), refuses an event with a Delay
	// ([ErrDelayOnLog]: a log has no due times) and sends no pg_notify
	// (the relay's ticker polls): DisableNotify, NotifyInterval and
	// NotifyEveryEmit do not apply, and NotifyEveryEmit set gives an
	// *outbox.ConfigError.
	Kind outbox.TableKind
	// The pg_notify sent in the caller's transaction goes to the channel
	// derived from Table ("<schema>.<table>", or "pgoutbox_<table>" when
	// that is longer than 63 bytes), which a dispatcher of the same Table
	// listens on: the channel is not configurable, so the two cannot
	// disagree.

	// DisableNotify turns the pg_notify off: dispatchers then find new
	// events by polling only. Defaults to false (notify on).
	DisableNotify bool
	// NotifyInterval is the least time between two Emit calls of this
	// Emitter that notify into one database (host, port and database of
	// the transaction's connection; measured on the monotonic clock). An
	// Emit sooner than that after the last one that notified sends no
	// pg_notify: its event is claimed by one of the dispatcher's
	// follow-up claims, which run every fifth of its WakeupCooldown until
	// one WakeupCooldown after the wake-up (every 4ms for 20ms at the
	// defaults; none with NoWakeupCooldown), when its transaction has
	// committed by then, and otherwise by a later wake-up or poll: with
	// the dispatcher's defaults within its PollInterval of the commit,
	// even when the transaction that notified rolls back. An Emit that took the notify and failed gives it
	// back; a transaction that rolls back after it does not. Each
	// committing transaction that notified holds a database-wide lock
	// through its WAL flush, so notifying every Emit serialises the commits
	// of a write-heavy service (see docs/emitting.md). Defaults to 20ms, the dispatcher's default
	// WakeupCooldown (the span its follow-up claims cover); at most 10s.
	// Set NotifyEveryEmit instead for a notify in every Emit call.
	NotifyInterval time.Duration
	// NotifyEveryEmit sends a pg_notify in every Emit call, with no
	// throttle (NotifyInterval must then be zero). Defaults to false.
	NotifyEveryEmit bool
	// MaxPayloadBytes bounds the size of one event's payload. Defaults to
	// 900 KiB ([DefaultMaxPayloadBytes], which leaves room for headers
	// within the brokers' default 1 MiB message limits); must be 1 to
	// 64 MiB.
	MaxPayloadBytes int
	// MaxHeaders bounds the number of headers of one event. Defaults to 64
	// ([DefaultMaxHeaders]); must be 1 to 1024. Set NoHeaders instead to
	// reject every event that has a header.
	MaxHeaders int
	// NoHeaders rejects every event that has a header (MaxHeaders must then
	// be zero). Defaults to false.
	NoHeaders bool
	// MaxHeaderBytes bounds the total bytes of the header names and values
	// of one event. Defaults to 16 KiB ([DefaultMaxHeaderBytes]); must be 1
	// to 1 MiB.
	MaxHeaderBytes int
	// DisableTracePropagation stops Emit from adding the W3C traceparent
	// and tracestate of the OpenTelemetry span in its context to the
	// events' headers. Defaults to false (propagation on).
	DisableTracePropagation bool
	// AllowEmptyPayload lets events have a nil or empty payload. Defaults to
	// false: such events are rejected, since an empty body is more often a
	// bug than a message.
	AllowEmptyPayload bool

	// MeterProvider receives the pgoutbox.events.emitted counter (see
	// docs/observability.md). Defaults to otel.GetMeterProvider(), the
	// application's global provider, which records nothing until the
	// application installs one. A counter the provider refuses is logged
	// at WARN to slog.Default and counts nothing; New does not fail.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a producer span per Emit call, the child of
	// the span in Emit's context; its context is the traceparent the
	// events carry. Defaults to otel.GetTracerProvider(), which records
	// nothing until the application installs one (the events then carry
	// the traceparent of the span in Emit's context, if any).
	TracerProvider trace.TracerProvider
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	c.Table = c.Table.WithDefaults()
	if c.NotifyInterval == 0 && !c.NotifyEveryEmit {
		c.NotifyInterval = DefaultNotifyInterval
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MaxHeaders == 0 && !c.NoHeaders {
		c.MaxHeaders = DefaultMaxHeaders
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

// validate checks a config that went through withDefaults, and returns its
// table's names.
func (c Config) validate() (sqlname.Names, error) {
	names, err := sqlname.For(c.Table)
	if err != nil {
		return sqlname.Names{}, &outbox.ConfigError{Field: "Table", Reason: "is invalid", Err: err}
	}
	switch {
	case c.Kind != outbox.KindOutbox && c.Kind != outbox.KindLog:
		return sqlname.Names{}, &outbox.ConfigError{Field: "Kind", Reason: fmt.Sprintf("is %s, want outbox.KindOutbox or outbox.KindLog", c.Kind)}
	case c.Kind == outbox.KindLog && c.NotifyEveryEmit:
		return sqlname.Names{}, &outbox.ConfigError{Field: "NotifyEveryEmit", Reason: "must be false for a log (Kind outbox.KindLog): the relay polls, Emit never notifies"}
	}
	if err := c.validateLimits(); err != nil {
		return sqlname.Names{}, err
	}
	return names, nil
}

func (c Config) validateLimits() error {
	switch {
	case c.NotifyEveryEmit && c.NotifyInterval != 0:
		return &outbox.ConfigError{Field: "NotifyInterval", Reason: fmt.Sprintf("is %v, must be zero when NotifyEveryEmit is set", c.NotifyInterval)}
	case !c.NotifyEveryEmit && (c.NotifyInterval < 0 || c.NotifyInterval > 10*time.Second):
		return &outbox.ConfigError{Field: "NotifyInterval",
			Reason: fmt.Sprintf("is %v, must be at most 10s (set NotifyEveryEmit for a notify in every Emit)", c.NotifyInterval)}
	case c.NoHeaders && c.MaxHeaders != 0:
		return &outbox.ConfigError{Field: "MaxHeaders", Reason: fmt.Sprintf("is %d, must be zero when NoHeaders is set", c.MaxHeaders)}
	}
	if err := checkRange("MaxPayloadBytes", c.MaxPayloadBytes, 1, payloadLimit); err != nil {
		return err
	}
	if !c.NoHeaders {
		if err := checkRange("MaxHeaders", c.MaxHeaders, 1, headerCountLimit); err != nil {
			err.Reason += " (set NoHeaders to allow none)"
			return err
		}
	}
	if err := checkRange("MaxHeaderBytes", c.MaxHeaderBytes, 1, headerBytesLimit); err != nil {
		return err
	}
	return nil
}

func checkRange(option string, v, lo, hi int) *outbox.ConfigError {
	if v < lo || v > hi {
		return &outbox.ConfigError{Field: option, Reason: fmt.Sprintf("is %d, must be %d to %d", v, lo, hi)}
	}
	return nil
}
