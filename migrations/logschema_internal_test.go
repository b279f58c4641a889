package migrations

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every function the log's templates create is listed in allLogFunctions
// (its signature, who may call it), so that Verify checks it and
// RenderGrants grants it: a migration that adds one (the tick function,
// part_truncate) must list it there.
func TestLogFunctionsListed(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, f := range allLogFunctions {
		listed[f.key] = true
		_, ok := logTemplateData(mustNames(t))[f.key]
		require.True(t, ok, "template key %q of %s", f.key, f.suffix)
	}
	created := templateFunctions(logFiles)
	require.NotEmpty(t, created)
	for key := range created {
		require.True(t, listed[key], "the log's templates create {{.%s}}: list it in allLogFunctions", key)
	}
	require.Len(t, logFunctions, len(created))
}

// The pattern finds a template's functions however CREATE is written.
func TestCreatedFunctionPattern(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{
		"CREATE FUNCTION {{.tick}}(p_token uuid)",
		"create or replace function {{ .tick }} (p_token uuid)",
		"CREATE OR REPLACE FUNCTION\n  {{.tick}}(",
	} {
		m := createdFunction.FindStringSubmatch(sql)
		require.NotNil(t, m, sql)
		require.Equal(t, "tick", m[1])
	}
}

func mustNames(t *testing.T) sqlname.Names {
	t.Helper()
	n, err := sqlname.For(outbox.Table{})
	require.NoError(t, err)
	return n
}
