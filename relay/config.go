package relay

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config configures a Relay. Every field but Pool, Log, Group and
// Publisher has a default, applied by New to its zero value; a value out
// of range makes New return an *outbox.ConfigError naming the field.
// Special settings have fields of their own (NoTicker, NoRetention),
// never a magic number.
type Config struct {
	// Pool is the relay's connection pool: every statement goes through
	// it (ticks, batches, cursor moves, retention). A transaction-mode
	// pooler works. Required; its MaxConns must be at least 3: a batch's
	// events are read by one statement, holding a connection while they
	// publish (docs/relay.md).
	Pool *pgxpool.Pool
	// Log is the log table to relay (migrated with migrations.Config.Kind
	// outbox.KindLog). Required: Log.Name must be set (Schema defaults to
	// "public"), so that a relay never reads the default outbox table.
	Log outbox.Table
	// Group is the consumer group this relay reads for: its cursor, its
	// lease, its parked keys. Create it first with CreateGroup. One relay
	// of a group publishes at a time; the others wait for its lease.
	// Required; 1 to 200 bytes of UTF-8 without NUL.
	Group string
	// Owner names this relay in the ticker and cursor rows. Defaults to
	// "<hostname>-<pid>-<random>"; at most 200 bytes of UTF-8 without NUL.
	Owner string

	// Publisher receives the events, in commit order per key (see
	// docs/relay.md, "Guarantees"). Required.
	Publisher outbox.Publisher
	// RouteFunc picks an event's destination (topic, subject). Defaults
	// to the event type.
	RouteFunc func(e outbox.Event) string

	// Lanes is how many publishing lanes run at once: an event goes to
	// the lane of its order key's hash (keyless events spread by seq), so
	// that a key's events stay in order and a slow or failing key holds
	// only its lane. Defaults to 16; 1 to 1,024.
	Lanes int
	// MaxBatch is the most events one batch holds: the reader reads up to
	// the newest tick within it (at least the next tick, cut at MaxBatch
	// inside one huge tick and resumed where it stopped). Defaults to
	// 5,000; 1 to 1,000,000.
	MaxBatch int

	// TickInterval is the period of the ticker's tick call (a tick row is
	// written only when events came, or IdleTick passed), and of the
	// reader's poll of the ticks table when it is not woken in-process.
	// Defaults to 10ms; 1ms to 1s.
	TickInterval time.Duration
	// IdleTick is the longest time between two ticks while no event
	// comes: it keeps the snapshot horizon moving for retention and gives
	// the tick-age health signal. Defaults to 1s; TickInterval to 1h.
	IdleTick time.Duration
	// NoTicker makes this relay never tick: another replica (or process)
	// must. Defaults to false: every replica competes for the ticker's
	// lease and one ticks.
	NoTicker bool
	// TickerLease is how long the ticker's lease holds without renewal;
	// the holder renews it every third of it, and a replica that did not
	// get it tries again as often. Defaults to 10s; 1s to 1h.
	TickerLease time.Duration
	// GroupLease is how long the group's lease holds without renewal; the
	// holder renews it every third of it. A relay paused for longer loses
	// the group, and the batch it published but did not record is
	// published again by the next holder (the duplicate window, see
	// docs/relay.md). Defaults to 30s; 1s to 1h.
	GroupLease time.Duration

	// KeyRetries is how many times a lane retries an event whose publish
	// failed (neither permanent nor an outage) before it parks the event's
	// key. The lane waits meanwhile; other lanes go on. Defaults to 8; 1
	// to 1,000.
	KeyRetries int
	// KeyRetryMin is the first wait before such a retry, doubled at each
	// retry up to KeyRetryMax. Defaults to 100ms; 1ms to 1h.
	KeyRetryMin time.Duration
	// KeyRetryMax bounds the wait between retries. Defaults to 1m;
	// KeyRetryMin to 24h.
	KeyRetryMax time.Duration
	// PublishTimeout bounds one Publisher.Publish call. Defaults to 30s;
	// 1ms to 24h.
	PublishTimeout time.Duration
	// CircuitMinBackoff is how long publishing pauses after a Publish
	// call found every destination unavailable (outbox.ErrUnavailable):
	// the batch stays in memory, nothing is parked or spent, and a probe
	// follows. Defaults to 1s; 10ms to 1h.
	CircuitMinBackoff time.Duration
	// CircuitMaxBackoff bounds the doubling of the pause after failed
	// probes. Defaults to the larger of 1m and CircuitMinBackoff;
	// CircuitMinBackoff to 24h.
	CircuitMaxBackoff time.Duration
	// CircuitProbeSize is the most events a probe publishes. Defaults to
	// 1; 1 to MaxBatch.
	CircuitProbeSize int

	// RetentionInterval is the time between retention passes, run by the
	// replica holding the ticker's lease: they truncate the log's parts
	// every group has passed and delete old ticks. Defaults to 1m; 10ms
	// to 24h. Set NoRetention instead for none.
	RetentionInterval time.Duration
	// NoRetention turns this relay's retention off (RetentionInterval
	// must then be zero): the log keeps its parts until another relay or
	// an operator (outboxctl relay maintain) retires them. Defaults to
	// false.
	NoRetention bool
	// DrainTimeout is how long a stop lets the batch in flight finish
	// (every event acked or parked, then the cursor move) before it
	// cancels it; a cancelled batch is published again by the next
	// holder of the group (at-least-once). A Stop whose ctx ends first
	// cancels it then. Defaults to 30s; 1ms to 1h.
	DrainTimeout time.Duration

	// SkipVerify starts the relay without comparing the log's schema with
	// what this version needs (migrations.Verify with outbox.KindLog).
	// Defaults to false: a schema that does not match makes Start fail,
	// naming each object with its expected and actual state.
	SkipVerify bool

	// Logger receives lifecycle and error logs, never payloads. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// OnError is called for internal errors: failed ticks, reads, cursor
	// moves, renewals, a lost lease (the batch in flight is published
	// again by the next holder). It must not block.
	OnError func(err error)
	// MeterProvider receives the relay's metrics (see docs/relay.md,
	// "Metrics"). Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider receives the relay's spans (pgoutbox.relay.batch).
	// Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// newServices, when set, replaces newServices; only this package's
	// tests set it.
	newServices func(Config, *recorder) (services, error)
	// sampleEvery, when set, replaces sampleInterval; only this package's
	// tests set it.
	sampleEvery time.Duration
}

// maxNameLen bounds Owner and Group, in bytes.
const maxNameLen = 200

func (c Config) withDefaults() Config {
	c.Log.Schema = cmp.Or(c.Log.Schema, outbox.DefaultSchema) // Name stays: it is required
	c.Owner = cmp.Or(c.Owner, defaultOwner())
	c.Lanes = cmp.Or(c.Lanes, 16)
	c.MaxBatch = cmp.Or(c.MaxBatch, 5000)
	c.TickInterval = cmp.Or(c.TickInterval, 10*time.Millisecond)
	c.IdleTick = cmp.Or(c.IdleTick, time.Second)
	c.TickerLease = cmp.Or(c.TickerLease, 10*time.Second)
	c.GroupLease = cmp.Or(c.GroupLease, 30*time.Second)
	c.KeyRetries = cmp.Or(c.KeyRetries, 8)
	c.KeyRetryMin = cmp.Or(c.KeyRetryMin, 100*time.Millisecond)
	c.KeyRetryMax = cmp.Or(c.KeyRetryMax, max(time.Minute, c.KeyRetryMin))
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 30*time.Second)
	c.CircuitMinBackoff = cmp.Or(c.CircuitMinBackoff, time.Second)
	c.CircuitMaxBackoff = cmp.Or(c.CircuitMaxBackoff, max(time.Minute, c.CircuitMinBackoff))
	c.CircuitProbeSize = cmp.Or(c.CircuitProbeSize, 1)
	if !c.NoRetention {
		c.RetentionInterval = cmp.Or(c.RetentionInterval, time.Minute)
	}
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 30*time.Second)
	if c.RouteFunc == nil {
		c.RouteFunc = func(e outbox.Event) string { return e.Type }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.MeterProvider = cmp.Or(c.MeterProvider, otel.GetMeterProvider())
	c.TracerProvider = cmp.Or(c.TracerProvider, otel.GetTracerProvider())
	return c
}

// minPoolConns is the fewest connections the relay's pool must allow: a
// batch's events stream on one connection while its pieces' cursor moves
// and the lease renewals run on another and the ticker on a third.
const minPoolConns = 3

// validate returns an *outbox.ConfigError for the first field out of
// range, in the order of Config's fields.
func (c Config) validate() error {
	if c.Pool == nil {
		return &outbox.ConfigError{Field: "Pool", Reason: "is required"}
	}
	if c.Pool.Config().MaxConns < minPoolConns {
		return &outbox.ConfigError{Field: "Pool", Reason: "must allow at least 3 connections (MaxConns): the ticker, the batch stream and the cursor moves"}
	}
	if c.Log.Name == "" {
		return &outbox.ConfigError{Field: "Log", Reason: "must name the log table (Log.Name is empty)"}
	}
	if err := c.Log.Validate(); err != nil {
		return &outbox.ConfigError{Field: "Log", Reason: "is invalid", Err: err}
	}
	checks := []struct {
		ok     bool
		option string
		reason string
	}{
		{groupProblem(c.Group) == "", "Group", "must be 1 to 200 bytes of UTF-8 without NUL"},
		{pgvalue.TextProblem(c.Owner, maxNameLen) == "", "Owner", "must be at most 200 bytes of UTF-8 without NUL"},
		{c.Publisher != nil, "Publisher", "is required"},
		{between(c.Lanes, 1, 1024), "Lanes", "must be between 1 and 1024"},
		{between(c.MaxBatch, 1, 1_000_000), "MaxBatch", "must be between 1 and 1000000"},
		{between(c.TickInterval, time.Millisecond, time.Second), "TickInterval", "must be between 1ms and 1s"},
		{between(c.IdleTick, c.TickInterval, time.Hour), "IdleTick", "must be between TickInterval and 1h"},
		{between(c.TickerLease, time.Second, time.Hour), "TickerLease", "must be between 1s and 1h"},
		{between(c.GroupLease, time.Second, time.Hour), "GroupLease", "must be between 1s and 1h"},
		{between(c.KeyRetries, 1, 1000), "KeyRetries", "must be between 1 and 1000"},
		{between(c.KeyRetryMin, time.Millisecond, time.Hour), "KeyRetryMin", "must be between 1ms and 1h"},
		{between(c.KeyRetryMax, c.KeyRetryMin, 24*time.Hour), "KeyRetryMax", "must be between KeyRetryMin and 24h"},
		{between(c.PublishTimeout, time.Millisecond, 24*time.Hour), "PublishTimeout", "must be between 1ms and 24h"},
		{between(c.CircuitMinBackoff, 10*time.Millisecond, time.Hour), "CircuitMinBackoff", "must be between 10ms and 1h"},
		{between(c.CircuitMaxBackoff, c.CircuitMinBackoff, 24*time.Hour), "CircuitMaxBackoff", "must be between CircuitMinBackoff and 24h"},
		{between(c.CircuitProbeSize, 1, c.MaxBatch), "CircuitProbeSize", "must be between 1 and MaxBatch"},
		{c.NoRetention && c.RetentionInterval == 0 || !c.NoRetention && between(c.RetentionInterval, 10*time.Millisecond, 24*time.Hour),
			"RetentionInterval", onlyWithout("between 10ms and 24h", "NoRetention", "no retention", c.NoRetention)},
		{between(c.DrainTimeout, time.Millisecond, time.Hour), "DrainTimeout", "must be between 1ms and 1h"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return &outbox.ConfigError{Field: ch.option, Reason: ch.reason}
		}
	}
	return nil
}

// groupProblem says what is wrong with a consumer group's name; "" when
// nothing is.
func groupProblem(g string) string {
	if g == "" {
		return "is empty"
	}
	return pgvalue.TextProblem(g, maxNameLen)
}

func between[T cmp.Ordered](v, lo, hi T) bool { return v >= lo && v <= hi }

// onlyWithout is the reason for a duration out of its range, which it must
// be in unless the bool field that switches it off is set, and then zero.
func onlyWithout(rng, field, what string, set bool) string {
	if set {
		return "must be zero when " + field + " is set"
	}
	return "must be " + rng + " (set " + field + " for " + what + ")"
}

// defaultOwner is "<hostname>-<pid>-<random>", with the host name cut to
// 100 bytes of valid UTF-8 without NUL so that the result passes validate.
func defaultOwner() string {
	host, err := os.Hostname()
	host = strings.ToValidUTF8(strings.ReplaceAll(host, "\x00", ""), "")
	for len(host) > 100 {
		_, size := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-size]
	}
	if err != nil || host == "" {
		host = "relay"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}
