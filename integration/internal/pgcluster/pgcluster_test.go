package pgcluster_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestClusterSurvivesImmediateRestartAndStop: the cluster answers, keeps a
// committed row through a crash (restart -m immediate) and a stop, and
// refuses connections while stopped.
func TestClusterSurvivesImmediateRestartAndStop(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t)
	ctx := testctx.New(t)
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, c.URL)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, sql)
		return err
	}
	require.NoError(t, exec(`CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)`))
	require.NoError(t, c.RestartImmediate())
	require.NoError(t, exec(`SELECT 1/count(*) FROM kept`))
	require.NoError(t, c.Stop("fast"))
	require.Error(t, exec(`SELECT 1`), "the stopped cluster answered")
	require.NoError(t, c.Start())
	require.NoError(t, exec(`SELECT 1/count(*) FROM kept`))
	require.Contains(t, c.ServerLog(), "database system was interrupted", "no crash recovery in the server log")
}
