package dispatcher_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// silentServer accepts TCP connections on loopback and never answers, like
// a database host that hangs. It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// silentConfig is a connection config for the silent server at addr.
func silentConfig(t *testing.T, addr string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=600")
	require.NoError(t, err)
	return cfg
}

// A stop or a cancelled context ends a Run that is still in its start-up
// checks, against a server that never answers, within the stop's own
// deadline; Run then returns nil, as after a stop once started.
func TestStopDuringStartUp(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)

	silentPool := func(t *testing.T) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig("postgres://postgres@" + silentServer(t) + "/postgres?sslmode=disable")
		require.NoError(t, err)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	cases := []struct {
		name   string
		cancel bool // cancel Run's ctx instead of calling Stop
		setup  func(t *testing.T) (*pgxpool.Pool, dispatcher.Config)
	}{
		{"stop while checking the table", false, func(t *testing.T) (*pgxpool.Pool, dispatcher.Config) {
			return silentPool(t), baseConfig(db)
		}},
		{"cancel while checking the table", true, func(t *testing.T) (*pgxpool.Pool, dispatcher.Config) {
			return silentPool(t), baseConfig(db)
		}},
		{"stop while probing wake-ups", false, func(t *testing.T) (*pgxpool.Pool, dispatcher.Config) {
			cfg := baseConfig(db)
			cfg.Wakeup = dispatcher.WakeupRequired
			cfg.WakeupProbeTimeout = time.Minute
			cfg.ListenerConnConfig = silentConfig(t, silentServer(t))
			return db.Pool, cfg
		}},
		{"cancel while probing wake-ups", true, func(t *testing.T) (*pgxpool.Pool, dispatcher.Config) {
			cfg := baseConfig(db)
			cfg.Wakeup = dispatcher.WakeupRequired
			cfg.WakeupProbeTimeout = time.Minute
			cfg.ListenerConnConfig = silentConfig(t, silentServer(t))
			return db.Pool, cfg
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, cfg := tc.setup(t)
			cfg.LeaseDuration = time.Minute // operations may take 30s: longer than the test waits
			d, err := dispatcher.New(pool, cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- d.Run(ctx) }()
			time.Sleep(200 * time.Millisecond) // let it reach the silent server

			if tc.cancel {
				cancel()
			} else {
				stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer stopCancel()
				require.NoError(t, d.Stop(stopCtx), "Stop must end a starting Run within its own deadline")
			}
			select {
			case err := <-errc:
				require.NoError(t, err, "a stop during start-up is a clean stop")
			case <-time.After(5 * time.Second):
				t.Fatal("Run still blocked in its start-up checks")
			}
		})
	}
}
