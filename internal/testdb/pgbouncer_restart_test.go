package testdb

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestBouncerStartsAgainAfterACrash kills the test's PgBouncer: it is
// started again on its port, and a connection through it works again
// (PgBouncer 1.18 crashes on some cancel requests; a test that goes
// through it must see a pooler that comes back, not a port refused for
// good).
func TestBouncerStartsAgainAfterACrash(t *testing.T) {
	t.Parallel()
	b, skip := StartBouncer(t)
	if b == nil {
		t.Skip(skip)
	}
	ctx := testctx.New(t)
	ping := func() error {
		c, err := pgx.Connect(ctx, b.URL)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close(context.Background()) }()
		return c.Ping(ctx)
	}
	require.NoError(t, ping())
	require.NoError(t, exec.Command("pkill", "-KILL", "-f", filepath.Join(b.dir, "pgbouncer.ini")).Run())
	testctx.Await(t, "a connection through PgBouncer started again", func() bool {
		return ping() == nil
	})
}
