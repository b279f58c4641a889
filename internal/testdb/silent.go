package testdb

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// SilentServer accepts TCP connections on loopback and never answers, like
// a database host that hangs. It returns its address and a channel closed
// once it accepted a first connection; it
// closes, with the connections it accepted, when the test ends.
func SilentServer(t *testing.T) (addr string, reached <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done, accepted := make(chan struct{}), make(chan struct{})
	noteAccepted := sync.OnceFunc(func() { close(accepted) })
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
			noteAccepted()
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
	return ln.Addr().String(), accepted
}

// SilentPool is a pool of a server that accepts connections and never
// answers (SilentServer); the pool closes when the test ends.
func SilentPool(t *testing.T) *pgxpool.Pool {
	addr, _ := SilentServer(t)
	pool, err := pgxpool.New(context.Background(), "postgres://x@"+addr+"/x?connect_timeout=30")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
