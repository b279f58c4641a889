package main

import (
	"cmp"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestRun keeps the example working: it runs it twice against the test
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`), forwarding to
// RabbitMQ when AMQP_URL is set and in process otherwise, and checks what
// it prints.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	for range 2 { // re-runnable
		var out strings.Builder
		require.NoError(t, run(ctx, url, os.Getenv("AMQP_URL"), 7, &out))
		text := out.String()
		require.Contains(t, text, "committed 7 orders", text)
		require.Equal(t, 7, strings.Count(text, "received "), text)
		require.Contains(t, text, "All 7 messages arrived.", text)
	}
}
