package emitter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The package has no function that writes events without a Config naming
// the table: a package-level Emit wrote to public.outbox_events whatever
// table the application used (issue 24 §9). Emitting goes through
// New(Config{Table: ...}) and Emitter.Emit.
func TestNoPackageLevelEmit(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Emit") {
				t.Errorf("%s: func %s writes events without a Config", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
}
