package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Child processes are this test binary run again with these variables set.
const (
	envChildRole   = "PGOUTBOX_IT_CHILD"
	envChildURL    = "PGOUTBOX_IT_URL"
	envChildSchema = "PGOUTBOX_IT_SCHEMA"

	roleMigrate = "migrate"
	childReady  = "ready"
)

// childMain runs one child role and returns its exit code.
func childMain(role string) int {
	switch role {
	case roleMigrate:
		if err := childMigrate(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintln(os.Stderr, "child: unknown role", role)
		return 2
	}
}

// childMigrate connects, says it is ready, waits until its stdin is closed
// (the start signal, given to every child at once) and migrates.
func childMigrate() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, os.Getenv(envChildURL))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	fmt.Println(childReady)
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return err
	}
	cfg := migrations.Config{Table: outbox.Table{Schema: os.Getenv(envChildSchema)}}
	return migrations.Migrate(ctx, conn, cfg)
}

// TestMigrateFromTenProcesses starts 10 OS processes that each open their
// own connection and call migrations.Migrate on the same, not yet existing,
// schema at the same instant, as 10 replicas of a service do when they are
// deployed together. Every one must succeed, and the outbox must end up
// migrated exactly once.
func TestMigrateFromTenProcesses(t *testing.T) {
	t.Parallel()
	const processes = 10

	db := pgtest.New(t)
	ctx := context.Background()
	// A schema that does not exist yet: creating it races too.
	schema := db.Schema + "_mig"
	t.Cleanup(func() {
		_, err := db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})

	self, err := os.Executable()
	require.NoError(t, err)

	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stderr *bytes.Buffer
	}
	children := make([]child, processes)
	for i := range children {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(),
			envChildRole+"="+roleMigrate,
			envChildURL+"="+db.URL,
			envChildSchema+"="+schema,
		)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stderr := &bytes.Buffer{}
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[i] = child{cmd: cmd, stdin: stdin, stderr: stderr}

		// Wait for "ready": the child is connected and waits for the start.
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err, "child %d: %s", i, stderr)
		require.Equal(t, childReady, strings.TrimSpace(line))
	}

	// Start them all at once.
	for _, c := range children {
		require.NoError(t, c.stdin.Close())
	}
	for i, c := range children {
		require.NoError(t, c.cmd.Wait(), "child %d: %s", i, c.stderr)
	}

	conn := db.Conn(t)
	cfg := migrations.Config{Table: outbox.Table{Schema: schema}}
	version, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), version)

	var tables int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`,
		schema, outbox.DefaultTable).Scan(&tables)
	require.NoError(t, err)
	require.Equal(t, 1, tables)

	// An 11th, late migration finds nothing to do.
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	version, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), version)
}
