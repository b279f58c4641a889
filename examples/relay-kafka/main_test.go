package main

import (
	"cmp"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestRun keeps the example working: it runs it twice against the test
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and
// KAFKA_BROKERS or an in-process kfake cluster, and checks what it prints:
// every event, each order's order.created before its order.paid.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	for range 2 { // re-runnable
		var out strings.Builder
		require.NoError(t, run(ctx, url, os.Getenv("KAFKA_BROKERS"), 4, &out))
		text := out.String()
		require.Contains(t, text, "committed 4 orders", text)
		require.Equal(t, 8, strings.Count(text, "(topic demo.relay.orders, partition "), text)
		require.Contains(t, text, "All 8 events arrived.", text)
		require.Contains(t, text, "relay stopped: 8 events published", text)
		requireCreatedFirst(t, text)
	}
}

// requireCreatedFirst checks that each order's order.created line comes
// before its order.paid line.
func requireCreatedFirst(t *testing.T, text string) {
	t.Helper()
	line := regexp.MustCompile(`received \S+  (order\.\w+)\s+order (\S+)`)
	created := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(text, -1) {
		if m[1] == "order.created" {
			created[m[2]] = true
			continue
		}
		require.True(t, created[m[2]], "order %s paid before created:\n%s", m[2], text)
	}
}
