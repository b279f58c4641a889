package pgenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

func TestChoose(t *testing.T) {
	t.Parallel()

	errRefused := errors.New("connection refused")
	errNoDocker := errors.New("cannot connect to the Docker daemon")

	type testBundle struct {
		env          map[string]string
		localErr     error
		dockerErr    error
		localCalls   int
		dockerCalls  int
		probes       Probes
		hadDeadlines []bool
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{env: map[string]string{}}
		b.probes = Probes{
			Getenv: func(k string) string { return b.env[k] },
			LocalFunc: func(ctx context.Context) error {
				b.localCalls++
				_, ok := ctx.Deadline()
				b.hadDeadlines = append(b.hadDeadlines, ok)
				return b.localErr
			},
			DockerFunc: func(ctx context.Context) error {
				b.dockerCalls++
				_, ok := ctx.Deadline()
				b.hadDeadlines = append(b.hadDeadlines, ok)
				return b.dockerErr
			},
		}
		return b
	}

	t.Run("DockerWhenNothingElse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.localErr = errRefused

		got, err := Choose(context.Background(), b.probes)
		require.NoError(t, err)
		require.Equal(t, Choice{Source: SourceDocker}, got)
		require.Equal(t, 1, b.localCalls)
		require.Equal(t, 1, b.dockerCalls)
		require.Equal(t, []bool{true, true}, b.hadDeadlines, "every probe is bounded")
	})

	t.Run("EnvWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env[testdb.EnvURL] = "postgres://u@db.example:5433/x"

		got, err := Choose(context.Background(), b.probes)
		require.NoError(t, err)
		require.Equal(t, Choice{Source: SourceEnv, URL: "postgres://u@db.example:5433/x"}, got)
		require.Zero(t, b.localCalls, "no probe when the variable is set")
		require.Zero(t, b.dockerCalls)
	})

	t.Run("LocalBeforeDocker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		got, err := Choose(context.Background(), b.probes)
		require.NoError(t, err)
		require.Equal(t, Choice{Source: SourceLocal, URL: testdb.LocalURL}, got)
		require.Equal(t, 1, b.localCalls)
		require.Zero(t, b.dockerCalls, "Docker is not asked when a local database answers")
	})

	t.Run("NeitherFailsWithHowTo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.localErr = errRefused
		b.dockerErr = errNoDocker

		_, err := Choose(context.Background(), b.probes)
		var noDB *NoDatabaseError
		require.ErrorAs(t, err, &noDB)
		require.ErrorIs(t, noDB.Local, errRefused)
		require.ErrorIs(t, noDB.Docker, errNoDocker)
		msg := err.Error()
		require.Contains(t, msg, testdb.EnvURL+"=postgres://")
		require.Contains(t, msg, "127.0.0.1:5432")
		require.Contains(t, msg, "Docker")
		require.Contains(t, msg, errRefused.Error())
		require.Contains(t, msg, errNoDocker.Error())
	})
}

func TestEnsure(t *testing.T) {
	t.Parallel()

	t.Run("LocalNeedsNoStop", func(t *testing.T) {
		t.Parallel()
		var logged []string
		p := Probes{
			Getenv:     func(string) string { return "" },
			LocalFunc:  func(context.Context) error { return nil },
			DockerFunc: func(context.Context) error { panic("not asked") },
		}
		url, stop, err := Ensure(context.Background(), p, func(f string, _ ...any) { logged = append(logged, f) })
		require.NoError(t, err)
		require.Equal(t, testdb.LocalURL, url)
		require.NoError(t, stop(context.Background()))
		require.Len(t, logged, 1)
	})

	t.Run("NoneReturnsError", func(t *testing.T) {
		t.Parallel()
		p := Probes{
			Getenv:     func(string) string { return "" },
			LocalFunc:  func(context.Context) error { return errors.New("refused") },
			DockerFunc: func(context.Context) error { return errors.New("no docker") },
		}
		_, stop, err := Ensure(context.Background(), p, nil)
		require.ErrorAs(t, err, new(*NoDatabaseError))
		require.NoError(t, stop(context.Background()))
	})
}

// TestDockerHealthIsFast runs the real Docker probe: whatever the machine
// has, the answer must come within the probe timeout (plus slack), so a
// machine without Docker fails fast with a clear message.
func TestDockerHealthIsFast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	start := time.Now()
	err := DockerHealth(ctx)
	t.Logf("DockerHealth after %v: %v", time.Since(start), err)
	require.Less(t, time.Since(start), ProbeTimeout+2*time.Second)
}
