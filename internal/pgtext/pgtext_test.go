package pgtext_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgtext"
)

func TestProblem(t *testing.T) {
	t.Parallel()
	require.Empty(t, pgtext.Problem("", 3))
	require.Empty(t, pgtext.Problem("héé", 5))
	require.Equal(t, "is longer than 4 bytes", pgtext.Problem("héé", 4))
	require.Equal(t, "is not valid UTF-8", pgtext.Problem("a\xffb", 10))
	require.Equal(t, "contains a NUL byte", pgtext.Problem("a\x00b", 10))
}
