package emitter

import (
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/pgtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Defaults and bounds of the Config limits.
const (
	// DefaultMaxPayloadBytes is the default payload limit: 1 MiB, the usual
	// default message limit of Kafka and NATS.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxMaxPayloadBytes is the largest payload limit New accepts: 64 MiB.
	MaxMaxPayloadBytes = 64 << 20
	// DefaultMaxHeaders is the default limit on the number of headers of
	// one event.
	DefaultMaxHeaders = 64
	// MaxMaxHeaders is the largest header count limit New accepts.
	MaxMaxHeaders = 1024
	// DefaultMaxHeaderBytes is the default limit on the total bytes of the
	// header names and values of one event: 16 KiB.
	DefaultMaxHeaderBytes = 16 << 10
	// MaxMaxHeaderBytes is the largest header size limit New accepts: 1 MiB.
	MaxMaxHeaderBytes = 1 << 20
	// DefaultNotifyInterval is the default least time between two Emit
	// calls that notify.
	DefaultNotifyInterval = 20 * time.Millisecond
)

// Config configures an Emitter. The zero value is usable: it emits into
// public.outbox_events and wakes dispatchers with pg_notify.
type Config struct {
	// Table is the outbox table events are inserted into. Defaults to
	// public.outbox_events (see [outbox.Table.WithDefaults]); both names
	// must pass [outbox.ValidateIdentifier].
	Table outbox.Table
	// NotifyChannel is the channel of the pg_notify sent in the caller's
	// transaction to wake dispatchers. Defaults to "<schema>.<table>" (or
	// "pgoutbox_<table>" when that is longer than 63 bytes), the channel a
	// dispatcher of the same Table listens on. At most 63 bytes of UTF-8
	// without NUL. Ignored when DisableNotify is set.
	NotifyChannel string
	// DisableNotify turns the pg_notify off: dispatchers then find new
	// events by polling only. Defaults to false (notify on).
	DisableNotify bool
	// NotifyInterval is the least time between two Emit calls of this
	// Emitter that notify into one database (host, port and database of
	// the transaction's connection; measured on the monotonic clock). An
	// Emit sooner than that after the last one that notified sends no
	// pg_notify: its event is claimed by the dispatcher's trailing claim,
	// one WakeupCooldown after the wake-up (when that is above 0), when
	// its transaction has committed by then, and otherwise by a later
	// wake-up or poll: with the dispatcher's defaults within its
	// PollInterval of the commit, even when the transaction that notified
	// rolls back. An Emit that took the notify and failed gives it
	// back; a transaction that rolls back after it does not. Each
	// committing transaction that notified holds a database-wide lock
	// through its WAL flush, so notifying every Emit serialises the commits
	// of a write-heavy service (see docs/emitting.md). Defaults to 20ms, the dispatcher's default
	// WakeupCooldown (which coalesces closer wake-ups anyway); at most 10s,
	// or -1 for a notify in every Emit call.
	NotifyInterval time.Duration
	// MaxPayloadBytes bounds the size of one event's payload. Defaults to
	// 1 MiB ([DefaultMaxPayloadBytes]); must be 1 to 64 MiB
	// ([MaxMaxPayloadBytes]).
	MaxPayloadBytes int
	// MaxHeaders bounds the number of headers of one event. Defaults to 64
	// ([DefaultMaxHeaders]); must be 1 to 1024 ([MaxMaxHeaders]), or -1 to
	// reject every event that has a header.
	MaxHeaders int
	// MaxHeaderBytes bounds the total bytes of the header names and values
	// of one event. Defaults to 16 KiB ([DefaultMaxHeaderBytes]); must be 1
	// to 1 MiB ([MaxMaxHeaderBytes]).
	MaxHeaderBytes int
	// DisableTracePropagation stops Emit from adding the W3C traceparent
	// and tracestate of the OpenTelemetry span in its context to the
	// events' headers. Defaults to false (propagation on).
	DisableTracePropagation bool
	// AllowEmptyPayload lets events have a nil or empty payload. Defaults to
	// false: such events are rejected, since an empty body is more often a
	// bug than a message.
	AllowEmptyPayload bool
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	c.Table = c.Table.WithDefaults()
	if c.NotifyChannel == "" {
		c.NotifyChannel = sqlname.Names{Table: c.Table}.Channel()
	}
	if c.NotifyInterval == 0 {
		c.NotifyInterval = DefaultNotifyInterval
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MaxHeaders == 0 {
		c.MaxHeaders = DefaultMaxHeaders
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
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
	if reason := channelProblem(c.NotifyChannel); reason != "" && !c.DisableNotify {
		return sqlname.Names{}, &outbox.ConfigError{Field: "NotifyChannel", Reason: reason}
	}
	if c.NotifyInterval != -1 && (c.NotifyInterval < 0 || c.NotifyInterval > 10*time.Second) {
		return sqlname.Names{}, &outbox.ConfigError{Field: "NotifyInterval",
			Reason: fmt.Sprintf("is %v, must be at most 10s, or -1 for a notify in every Emit", c.NotifyInterval)}
	}
	if err := checkRange("MaxPayloadBytes", c.MaxPayloadBytes, 1, MaxMaxPayloadBytes); err != nil {
		return sqlname.Names{}, err
	}
	if c.MaxHeaders != -1 {
		if err := checkRange("MaxHeaders", c.MaxHeaders, 1, MaxMaxHeaders); err != nil {
			err.Reason += " (or -1 for no headers)"
			return sqlname.Names{}, err
		}
	}
	if err := checkRange("MaxHeaderBytes", c.MaxHeaderBytes, 1, MaxMaxHeaderBytes); err != nil {
		return sqlname.Names{}, err
	}
	return names, nil
}

func checkRange(option string, v, lo, hi int) *outbox.ConfigError {
	if v < lo || v > hi {
		return &outbox.ConfigError{Field: option, Reason: fmt.Sprintf("is %d, must be %d to %d", v, lo, hi)}
	}
	return nil
}

// channelProblem says what is wrong with a notify channel name, or "". The
// name is passed to pg_notify as a value, so it needs no quoting, but
// PostgreSQL rejects empty names and names of 64 bytes or more.
func channelProblem(ch string) string {
	if ch == "" {
		return "is empty"
	}
	return pgtext.Problem(ch, outbox.MaxIdentifierLen)
}
