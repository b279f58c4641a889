// Package pgenv decides where the integration tests' PostgreSQL comes from
// and, when Docker is the only way to get one, starts it with
// testcontainers-go.
//
// The order is fixed: the URL in PGOUTBOX_TEST_DATABASE_URL when it is set;
// else a PostgreSQL answering on 127.0.0.1:5432; else a container, when a
// Docker engine answers; else an error saying how to provide a database.
// Nothing is ever skipped silently.
package pgenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// Image is the PostgreSQL image started when Docker is the only source.
const Image = "postgres:17-alpine"

// ProbeTimeout bounds each probe, so a machine without Docker learns it at
// once instead of waiting on a dead socket.
const ProbeTimeout = 3 * time.Second

// Source says where the database came from.
type Source string

// The sources, in the order they are tried.
const (
	// SourceEnv is the URL in PGOUTBOX_TEST_DATABASE_URL.
	SourceEnv Source = "env"
	// SourceLocal is the PostgreSQL answering on 127.0.0.1:5432.
	SourceLocal Source = "local"
	// SourceDocker is a PostgreSQL container started with testcontainers.
	SourceDocker Source = "docker"
)

// Choice is the outcome of [Choose].
type Choice struct {
	// Source says where the database comes from.
	Source Source
	// URL is the database URL; empty for SourceDocker until the container
	// is started with [StartContainer].
	URL string
}

// Probes are the questions [Choose] asks of the machine. Tests replace
// them; [DefaultProbes] asks the real machine.
type Probes struct {
	// Getenv reads an environment variable.
	Getenv func(key string) string
	// LocalFunc returns nil when a PostgreSQL answers on 127.0.0.1:5432.
	LocalFunc func(ctx context.Context) error
	// DockerFunc returns nil when a Docker engine answers.
	DockerFunc func(ctx context.Context) error
}

// NoDatabaseError is returned by [Choose] when no source answers. Its text
// says how to provide a database.
type NoDatabaseError struct {
	// Local is why 127.0.0.1:5432 did not answer.
	Local error
	// Docker is why no Docker engine answered.
	Docker error
}

func (e *NoDatabaseError) Error() string {
	return fmt.Sprintf("no PostgreSQL for the tests: %s is unset; "+
		"nothing answers on 127.0.0.1:5432 (%v); no Docker engine answers (%v).\n"+
		"Provide one of:\n"+
		"  - %s=postgres://USER@HOST:PORT/DB?sslmode=disable (the user must be able to create schemas);\n"+
		"  - PostgreSQL on 127.0.0.1:5432 with trust authentication for user postgres;\n"+
		"  - a running Docker engine: `make test` then starts %s with testcontainers.",
		testdb.EnvURL, e.Local, e.Docker, testdb.EnvURL, Image)
}

// Choose returns the first source that answers: the environment variable,
// the local PostgreSQL, then Docker. It returns a [*NoDatabaseError] when
// none does. Docker is probed only when the first two fail.
func Choose(ctx context.Context, p Probes) (Choice, error) {
	if u := p.Getenv(testdb.EnvURL); u != "" {
		return Choice{Source: SourceEnv, URL: u}, nil
	}
	localErr := probe(ctx, p.LocalFunc)
	if localErr == nil {
		return Choice{Source: SourceLocal, URL: testdb.LocalURL}, nil
	}
	dockerErr := probe(ctx, p.DockerFunc)
	if dockerErr == nil {
		return Choice{Source: SourceDocker}, nil
	}
	return Choice{}, &NoDatabaseError{Local: localErr, Docker: dockerErr}
}

func probe(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	return f(ctx)
}

// DefaultProbes asks the real machine: os.Getenv, a TCP dial of
// 127.0.0.1:5432, and testcontainers' Docker health check.
func DefaultProbes() Probes {
	return Probes{Getenv: os.Getenv, LocalFunc: DialLocal, DockerFunc: DockerHealth}
}

// DialLocal returns nil when something accepts TCP connections on
// 127.0.0.1:5432, the address of [testdb.LocalURL].
func DialLocal(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", "127.0.0.1:5432")
	if err != nil {
		return err
	}
	return c.Close()
}

// DockerHealth returns nil when testcontainers finds a Docker engine that
// answers an Info call within ctx. testcontainers panics in some set-ups
// without a Docker host; that is turned into an error too.
func DockerHealth(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	quiet := testcontainers.WithLogger(log.New(io.Discard, "", 0))
	p, err := testcontainers.NewDockerProvider(quiet)
	if err != nil {
		return fmt.Errorf("testcontainers finds no Docker host: %w", err)
	}
	// Health closes the provider.
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("docker engine does not answer: %w", err)
	}
	return nil
}

// StartContainer starts PostgreSQL in a container and returns its URL and
// the function that terminates it. The caller must call stop, also when its
// own work fails; testcontainers' reaper removes the container should the
// process die first.
func StartContainer(ctx context.Context) (url string, stop func(context.Context) error, err error) {
	c, err := tcpostgres.Run(ctx, Image,
		tcpostgres.WithDatabase("pgoutbox"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	stop = func(ctx context.Context) error {
		if c == nil {
			return nil
		}
		return c.Terminate(ctx)
	}
	if err != nil {
		return "", stop, fmt.Errorf("start %s: %w", Image, err)
	}
	url, err = c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", stop, fmt.Errorf("container url: %w", err)
	}
	return url, stop, nil
}

// Ensure returns a database URL from the first source that answers,
// starting a container when needed, and the function that releases it (a
// no-op unless a container was started). logf, when not nil, is told which
// source was chosen.
func Ensure(ctx context.Context, p Probes, logf func(format string, args ...any)) (url string, stop func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if logf == nil {
		logf = func(string, ...any) {}
	}
	choice, err := Choose(ctx, p)
	if err != nil {
		return "", noop, err
	}
	switch choice.Source {
	case SourceEnv:
		logf("pgoutbox: test database from %s", testdb.EnvURL)
	case SourceLocal:
		logf("pgoutbox: test database on 127.0.0.1:5432")
	case SourceDocker:
		logf("pgoutbox: starting %s with testcontainers", Image)
		url, stop, err := StartContainer(ctx)
		if err != nil {
			return "", noop, errors.Join(err, stop(context.WithoutCancel(ctx)))
		}
		return url, stop, nil
	}
	return choice.URL, noop, nil
}
