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

// TestRun keeps the example working: it runs it against the test database
// (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and NATS_URL or an
// in-process NATS server, and checks that the crashed delivery came back
// as the one duplicate, of the order that crashed, and shipped nothing.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	var out strings.Builder
	require.NoError(t, run(ctx, url, os.Getenv("NATS_URL"), &out))
	text := out.String()
	crashed := regexp.MustCompile(`order (\S+)  CRASH before the ack`).FindStringSubmatch(text)
	require.NotNil(t, crashed, text)
	require.Equal(t, 3, strings.Count(text, "new: shipment inserted, committed"), text)
	require.Equal(t, 1, strings.Count(text, "duplicate"), text)
	require.Contains(t, text, "order "+crashed[1]+"  delivery 2: duplicate", text)
	require.Contains(t, text, "3 shipment rows for 3 orders: exactly one each.", text)
}
