package main

import (
	"cmp"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun keeps the quickstart working: it runs it twice against the test
// database (PGOUTBOX_TEST_DATABASE_URL, set by `make test`) and checks what
// it prints.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), defaultURL)

	for range 2 { // re-runnable
		var out strings.Builder
		require.NoError(t, run(ctx, url, &out))
		text := out.String()
		require.Equal(t, 3, strings.Count(text, "committed: order"), text)
		require.Contains(t, text, "rolled back (payment declined): 0 order rows, 0 event rows", text)
		require.Equal(t, 3, strings.Count(text, "order.created  PENDING  0"), text)
	}
}
