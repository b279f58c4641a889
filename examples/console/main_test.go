package main

import (
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestRun serves the demo against the test database
// (PGOUTBOX_TEST_DATABASE_URL, set by `make test`): once the dispatcher
// has left the five invoice.mailed events FAILED, the console under
// /outbox shows them to the operator, refuses a stranger, and the
// service's own page is still at /.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(testctx.New(t))
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	out := newSettled(10)
	go func() { done <- run(ctx, url, ln, "secret", out) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	a, err := admin.New(pool, admin.Config{Table: table})
	require.NoError(t, err)
	serviceURL := "http://" + ln.Addr().String()
	get := func(path, password string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, serviceURL+path, nil)
		require.NoError(t, err)
		if password != "" {
			req.SetBasicAuth("operator", password)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	code, body := get("/", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "orders service")

	// The demo prints each event that settled: wait for all ten.
	select {
	case <-out.settled:
	case <-ctx.Done():
		t.Fatalf("the demo's events did not settle: %v", context.Cause(ctx))
	}
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, c.Failed)
	code, body = get("/outbox/", "secret")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `<tr data-status="FAILED">.*<td class="num count">5</td>`, body)
	require.Regexp(t, `<tr data-status="SENT">.*<td class="num count">5</td>`, body)
	require.Contains(t, body, `id="dispatchers"`)
	code, body = get("/outbox/events?status=FAILED&type=invoice.mailed", "secret")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 5, strings.Count(body, `class="event"`))
	require.Contains(t, body, `id="bulk-replay"`)

	code, _ = get("/outbox/", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("/outbox/", "")
	require.Equal(t, http.StatusUnauthorized, code)
}

// settledLines is the demo's output: it closes settled once n lines
// report an event SENT or FAILED.
type settledLines struct {
	mu      sync.Mutex
	n       int
	settled chan struct{}
}

func newSettled(n int) *settledLines { return &settledLines{n: n, settled: make(chan struct{})} }

func (s *settledLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for line := range strings.Lines(string(p)) {
		if s.n > 0 && (strings.HasSuffix(line, " SENT\n") || strings.HasSuffix(line, " FAILED\n")) {
			if s.n--; s.n == 0 {
				close(s.settled)
			}
		}
	}
	return len(p), nil
}
