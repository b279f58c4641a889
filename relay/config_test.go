package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every option out of range makes New return an *outbox.ConfigError
// naming it.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 201)
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"CircuitMaxBackoff", func(c *Config) { c.CircuitMinBackoff, c.CircuitMaxBackoff = time.Minute, time.Second }},
		{"CircuitMaxBackoff", func(c *Config) { c.CircuitMaxBackoff = 25 * time.Hour }},
		{"CircuitMinBackoff", func(c *Config) { c.CircuitMinBackoff = time.Millisecond }},
		{"CircuitMinBackoff", func(c *Config) { c.CircuitMinBackoff = 2 * time.Hour }},
		{"CircuitProbeSize", func(c *Config) { c.MaxBatch, c.CircuitProbeSize = 10, 11 }},
		{"CircuitProbeSize", func(c *Config) { c.CircuitProbeSize = -1 }},
		{"DrainTimeout", func(c *Config) { c.DrainTimeout = 2 * time.Hour }},
		{"DrainTimeout", func(c *Config) { c.DrainTimeout = -1 }},
		{"GroupLease", func(c *Config) { c.GroupLease = time.Millisecond }},
		{"GroupLease", func(c *Config) { c.GroupLease = 2 * time.Hour }},
		{"Group", func(c *Config) { c.Group = "" }},
		{"Group", func(c *Config) { c.Group = long }},
		{"Group", func(c *Config) { c.Group = "a\x00b" }},
		{"Group", func(c *Config) { c.Group = "\xff" }},
		{"IdleTick", func(c *Config) { c.TickInterval, c.IdleTick = 100*time.Millisecond, 50*time.Millisecond }},
		{"IdleTick", func(c *Config) { c.IdleTick = 2 * time.Hour }},
		{"KeyRetries", func(c *Config) { c.KeyRetries = -1 }},
		{"KeyRetries", func(c *Config) { c.KeyRetries = 1001 }},
		{"KeyRetryMax", func(c *Config) { c.KeyRetryMin, c.KeyRetryMax = time.Minute, time.Second }},
		{"KeyRetryMax", func(c *Config) { c.KeyRetryMax = 25 * time.Hour }},
		{"KeyRetryMin", func(c *Config) { c.KeyRetryMin = time.Microsecond }},
		{"KeyRetryMin", func(c *Config) { c.KeyRetryMin = 2 * time.Hour }},
		{"Lanes", func(c *Config) { c.Lanes = -1 }},
		{"Lanes", func(c *Config) { c.Lanes = 1025 }},
		{"Log", func(c *Config) { c.Log = outbox.Table{} }},
		{"Log", func(c *Config) { c.Log = outbox.Table{Name: "Bad-Name"} }},
		{"Log", func(c *Config) { c.Log = outbox.Table{Schema: "pg_x", Name: "log"} }},
		{"MaxBatch", func(c *Config) { c.MaxBatch = -1 }},
		{"MaxBatch", func(c *Config) { c.MaxBatch = 1_000_001 }},
		{"Owner", func(c *Config) { c.Owner = long }},
		{"Owner", func(c *Config) { c.Owner = "a\x00b" }},
		{"Pool", func(c *Config) { c.Pool = nil }},
		{"Pool", func(c *Config) { c.Pool = smallPool(t) }},
		{"PublishTimeout", func(c *Config) { c.PublishTimeout = time.Microsecond }},
		{"PublishTimeout", func(c *Config) { c.PublishTimeout = 25 * time.Hour }},
		{"Publisher", func(c *Config) { c.Publisher = nil }},
		{"RetentionInterval", func(c *Config) { c.RetentionInterval = time.Millisecond }},
		{"RetentionInterval", func(c *Config) { c.RetentionInterval = 25 * time.Hour }},
		{"RetentionInterval", func(c *Config) { c.NoRetention, c.RetentionInterval = true, time.Minute }},
		{"TickInterval", func(c *Config) { c.TickInterval = time.Microsecond }},
		{"TickInterval", func(c *Config) { c.TickInterval = 2 * time.Second }},
		{"TickerLease", func(c *Config) { c.TickerLease = time.Millisecond }},
		{"TickerLease", func(c *Config) { c.TickerLease = 2 * time.Hour }},
	} {
		cfg := validConfig(t, newFakes())
		tc.edit(&cfg)
		_, err := New(cfg)
		var cerr *outbox.ConfigError
		require.ErrorAs(t, err, &cerr, tc.field)
		require.Equal(t, tc.field, cerr.Field)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
	}
}

// The bounds themselves are accepted.
func TestConfigBoundsAccepted(t *testing.T) {
	t.Parallel()
	for _, edit := range []func(*Config){
		func(c *Config) {
			c.Lanes, c.MaxBatch, c.KeyRetries, c.CircuitProbeSize = 1, 1, 1, 1
			c.TickInterval, c.IdleTick = time.Millisecond, time.Millisecond
			c.TickerLease, c.GroupLease = time.Second, time.Second
			c.KeyRetryMin, c.KeyRetryMax = time.Millisecond, time.Millisecond
			c.PublishTimeout, c.DrainTimeout = time.Millisecond, time.Millisecond
			c.CircuitMinBackoff, c.CircuitMaxBackoff = 10*time.Millisecond, 10*time.Millisecond
			c.RetentionInterval = 10 * time.Millisecond
			c.Group = "g"
		},
		func(c *Config) {
			c.Lanes, c.MaxBatch, c.KeyRetries, c.CircuitProbeSize = 1024, 1_000_000, 1000, 1_000_000
			c.TickInterval, c.IdleTick = time.Second, time.Hour
			c.TickerLease, c.GroupLease = time.Hour, time.Hour
			c.KeyRetryMin, c.KeyRetryMax = time.Hour, 24*time.Hour
			c.PublishTimeout, c.DrainTimeout = 24*time.Hour, time.Hour
			c.CircuitMinBackoff, c.CircuitMaxBackoff = time.Hour, 24*time.Hour
			c.RetentionInterval = 24 * time.Hour
			c.Group, c.Owner = strings.Repeat("é", 100), strings.Repeat("o", 200)
		},
		func(c *Config) { c.NoRetention, c.NoTicker = true, true },
	} {
		cfg := validConfig(t, newFakes())
		edit(&cfg)
		_, err := New(cfg)
		require.NoError(t, err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := validConfig(t, nil).withDefaults()
	require.Equal(t, outbox.Table{Schema: "public", Name: "events_log"}, c.Log)
	require.NotEmpty(t, c.Owner)
	require.Equal(t, 16, c.Lanes)
	require.Equal(t, 5000, c.MaxBatch)
	require.Equal(t, 10*time.Millisecond, c.TickInterval)
	require.Equal(t, time.Second, c.IdleTick)
	require.Equal(t, 10*time.Second, c.TickerLease)
	require.Equal(t, 30*time.Second, c.GroupLease)
	require.Equal(t, 8, c.KeyRetries)
	require.Equal(t, 100*time.Millisecond, c.KeyRetryMin)
	require.Equal(t, time.Minute, c.KeyRetryMax)
	require.Equal(t, 30*time.Second, c.PublishTimeout)
	require.Equal(t, time.Second, c.CircuitMinBackoff)
	require.Equal(t, time.Minute, c.CircuitMaxBackoff)
	require.Equal(t, 1, c.CircuitProbeSize)
	require.Equal(t, time.Minute, c.RetentionInterval)
	require.Equal(t, 30*time.Second, c.DrainTimeout)
	require.Equal(t, "order.created", c.RouteFunc(outbox.Event{Type: "order.created"}))
	require.NotNil(t, c.Logger)
	require.NotNil(t, c.MeterProvider)
	require.NotNil(t, c.TracerProvider)
	require.NoError(t, c.validate())

	c = Config{NoRetention: true}.withDefaults()
	require.Zero(t, c.RetentionInterval, "no default with NoRetention")
	c = Config{KeyRetryMin: 2 * time.Minute, CircuitMinBackoff: 2 * time.Minute}.withDefaults()
	require.Equal(t, 2*time.Minute, c.KeyRetryMax, "at least KeyRetryMin")
	require.Equal(t, 2*time.Minute, c.CircuitMaxBackoff, "at least CircuitMinBackoff")
}

// smallPool is a pool of two connections, one too few for a relay.
func smallPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
