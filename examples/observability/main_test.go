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
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and checks the
// counters its Prometheus scrape shows after the four known events.
func TestRun(t *testing.T) {
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)
	const tbl = `pgoutbox_table="pgoutbox_observability.outbox_events"`

	for range 2 { // re-runnable, with a fresh MeterProvider each time
		var out strings.Builder
		require.NoError(t, run(ctx, url, &out))
		lines := strings.Split(out.String(), "\n")
		for _, want := range []string{
			`pgoutbox_events_emitted_total{pgoutbox_event_type="order.created",` + tbl + `} 3`,
			`pgoutbox_events_emitted_total{pgoutbox_event_type="order.cancelled",` + tbl + `} 1`,
			`pgoutbox_events_claimed_total{` + tbl + `} 4`,
			`pgoutbox_events_sent_total{pgoutbox_event_type="order.created",` + tbl + `} 3`,
			`pgoutbox_events_failed_total{error_type="handler_error",pgoutbox_event_type="order.cancelled",` + tbl + `} 1`,
			`pgoutbox_handler_duration_seconds_count{pgoutbox_event_type="order.created",` + tbl + `} 3`,
			`pgoutbox_event_start_delay_seconds_count{pgoutbox_event_type="order.created",` + tbl + `} 3`,
			`pgoutbox_backlog_due{` + tbl + `} 0`,
		} {
			require.Contains(t, lines, want, out.String())
		}
		require.NotContains(t, out.String(), "pgoutbox_events_retried_total", "no retry happened")
	}
}
