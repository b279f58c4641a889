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
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and AMQP_URL or
// the local RabbitMQ, and checks what it prints. Not parallel with other
// runs of itself: the demo's exchange and queue have fixed names.
func TestRun(t *testing.T) {
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	for range 2 { // re-runnable
		var out strings.Builder
		require.NoError(t, run(ctx, url, cmp.Or(os.Getenv("AMQP_URL"), defaultAMQPURL), 7, &out))
		text := out.String()
		require.Contains(t, text, "committed 7 orders", text)
		require.Equal(t, 7, strings.Count(text, "order.created  order "), text)
		require.Equal(t, 7, strings.Count(text, "(routing key order.created)"), text)
		require.Contains(t, text, "All 7 events arrived.", text)
	}
}
