package release_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/tools/internal/release"
)

// A go command stopped by its context says why (the context's cause),
// not only "signal: killed" (issue 24: a TestInstall killed by its own
// cap read like the OOM killer).
func TestSandboxGoSaysWhyItWasStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("the test's time ran out"))
	_, err := (&release.Sandbox{}).Go(ctx, t.TempDir(), "version")
	require.ErrorContains(t, err, "go version in ")
	require.ErrorContains(t, err, "stopped: the test's time ran out")
}
