package main

import (
	"cmp"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestRun keeps the quickstart working: it runs it twice against the test
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and checks the
// journeys it prints.
func TestRun(t *testing.T) {
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	for range 2 { // re-runnable
		var out strings.Builder
		require.NoError(t, run(ctx, url, &out))
		text := out.String()
		require.Contains(t, text, "rolled back (payment declined): 0 order rows, 0 event rows", text)
		require.Equal(t, 5, strings.Count(text, "PENDING      committed"), text)
		require.Equal(t, 3, strings.Count(text, "payment.captured (ada)     PROCESSING"), text)
		require.Equal(t, 3, strings.Count(text, "invoice.mailed (grace)     PROCESSING"), text)
		require.Contains(t, text, "invoice.mailed (grace)     FAILED       handler_error", text)
		require.Equal(t, 4, strings.Count(text, "SENT\n"), text)
		require.Contains(t, text, "All 5 events settled: 4 SENT, 1 FAILED.", text)
		require.Contains(t, text, "Dispatcher health: running, healthy.", text)
	}
}
