package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// WorkReplaces gives one replace line per published module, at VERSION,
// to its directory in the checkout, as a block that go.work accepts.
func TestWorkReplaces(t *testing.T) {
	t.Parallel()
	repo := loadRepo(t)
	text := repo.WorkReplaces()
	f, err := modfile.ParseWork("go.work", []byte("go 1.26.0\n\n"+text), nil)
	require.NoError(t, err, text)
	published := repo.Published()
	require.Len(t, f.Replace, len(published))
	for i, m := range published {
		r := f.Replace[i]
		require.Equal(t, m.Path(), r.Old.Path)
		require.Equal(t, repo.Version, r.Old.Version)
		require.Equal(t, filepath.Join(repo.Dir, filepath.FromSlash(m.Dir)), r.New.Path)
	}
}

// The recipe of docs/testing.md: a go.work outside the checkout that uses
// the user's own module and the checkout's core, plus the replace lines,
// builds the user's module without fetching the unpublished version.
// Without them the go command asks the proxy for VERSION (a 403 from
// proxy.golang.org).
func TestWorkReplacesRecipe(t *testing.T) {
	t.Parallel()
	repo := loadRepo(t)
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	require.NoError(t, os.Mkdir(app, 0o755))
	files := map[string]string{
		"go.mod":  "module example.com/app\n\ngo " + repo.Work.Go.Version + "\n\nrequire github.com/pgoutbox/pgoutbox " + repo.Version + "\n",
		"main.go": "package main\n\nimport \"github.com/pgoutbox/pgoutbox/outbox\"\n\nfunc main() { println(outbox.DefaultTable) }\n",
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(app, name), []byte(data), 0o644))
	}
	work := "go " + repo.Work.Go.Version + "\n\nuse (\n\t./app\n\t" + repo.Dir + "\n)\n\n" + repo.WorkReplaces()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644))

	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", os.DevNull, ".")
	cmd.Dir = app
	// A proxy that serves nothing: any fetch fails.
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOPROXY=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", work, out)
	require.NotContains(t, strings.ToLower(string(out)), "forbidden")
}
