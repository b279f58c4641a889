package ident_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/ident"
)

func TestProblem(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "outbox_events", "_x1", strings.Repeat("a", ident.MaxLen)} {
		require.Empty(t, ident.Problem(ok), ok)
	}
	for _, bad := range []string{"", "Outbox", "1abc", "pg_outbox", "a-b", "a b", `a"b`, "été", strings.Repeat("a", ident.MaxLen+1)} {
		require.NotEmpty(t, ident.Problem(bad), bad)
	}
	require.Equal(t, 48, ident.MaxTableLen)
}
