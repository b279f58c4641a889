package testdb

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// SilentPool is a pool of a server that accepts connections and never
// answers; the server and the pool end with the test.
func SilentPool(t *testing.T) *pgxpool.Pool {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
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
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	pool, err := pgxpool.New(context.Background(), "postgres://x@"+ln.Addr().String()+"/x?connect_timeout=30")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
