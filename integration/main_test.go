package integration_test

import (
	"os"
	"testing"

	"github.com/pgoutbox/pgoutbox/integration/pgtest"
)

// TestMain serves two roles: a child process re-executed by a test (see
// childMain), or the test binary itself, whose database pgtest provides.
func TestMain(m *testing.M) {
	if role := os.Getenv(envChildRole); role != "" {
		os.Exit(childMain(role))
	}
	pgtest.Main(m)
}
