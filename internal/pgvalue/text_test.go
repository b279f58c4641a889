package pgvalue_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
)

func TestProblem(t *testing.T) {
	t.Parallel()
	require.Empty(t, pgvalue.TextProblem("", 3))
	require.Empty(t, pgvalue.TextProblem("héé", 5))
	require.Equal(t, "is longer than 4 bytes", pgvalue.TextProblem("héé", 4))
	require.Equal(t, "is not valid UTF-8", pgvalue.TextProblem("a\xffb", 10))
	require.Equal(t, "contains a NUL byte", pgvalue.TextProblem("a\x00b", 10))
}
