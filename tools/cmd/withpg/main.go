// Command withpg runs a command with PGOUTBOX_TEST_DATABASE_URL set, so
// that the tests it runs have a PostgreSQL:
//
//	go run ./tools/cmd/withpg -- go test ./...
//
// The variable is passed on as it is when already set. Otherwise it points
// at the PostgreSQL answering on 127.0.0.1:5432, or, when none answers and
// a Docker engine does, at a PostgreSQL container that withpg starts with
// testcontainers-go before the command and terminates after it. When none
// of these exists withpg exits with status 2 and says how to provide a
// database. Otherwise it exits with the command's status.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/tools/pgenv"
)

// startTimeout bounds pulling and starting the PostgreSQL image.
const startTimeout = 5 * time.Minute

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg -- COMMAND [ARGS...]")
		return 2
	}

	startCtx, cancel := context.WithTimeout(context.Background(), startTimeout)
	url, stop, err := pgenv.Ensure(startCtx, pgenv.DefaultProbes(), logf)
	cancel()
	if err != nil {
		logf("withpg: %v", err)
		return 2
	}
	defer func() {
		if err := stop(context.Background()); err != nil {
			logf("withpg: terminate container: %v", err)
		}
	}()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), testdb.EnvURL+"="+url)
	// Signals go to the command; withpg waits for it to end and then still
	// terminates the container.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		logf("withpg: %v", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		if exit, ok := errors.AsType[*exec.ExitError](err); ok && exit.ExitCode() > 0 {
			return exit.ExitCode()
		}
		logf("withpg: %v", err)
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
