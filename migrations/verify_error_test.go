package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A VerifyError counts its problems in words that agree with the number:
// "1 problem", "2 problems" (issue 24 §7: "(1 problems)").
func TestVerifyErrorCountsProblems(t *testing.T) {
	t.Parallel()
	p := migrations.Problem{Object: "column a.b.c", Expected: "integer", Actual: "missing"}
	one := &migrations.VerifyError{Table: outbox.Table{Schema: "a", Name: "b"}, Problems: []migrations.Problem{p}}
	require.Contains(t, one.Error(), "does not match (1 problem): column a.b.c")
	two := &migrations.VerifyError{Table: outbox.Table{Schema: "a", Name: "b"}, Problems: []migrations.Problem{p, p}}
	require.Contains(t, two.Error(), "does not match (2 problems): column a.b.c")
}
