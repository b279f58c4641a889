package release_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/tools/internal/release"
)

// TestInstall installs pgoutbox as a user does, outside the repository
// with GOWORK=off, from a file module proxy serving the core, the
// publishers and the adapters of the working tree packed at VERSION.
// First each of them alone is fetched with `go get` into a fresh module,
// which must bring in the core at VERSION: a module reaching the core
// through a replace directive, or requiring a version the proxy does not
// serve, fails here. Then a module getting all of them, as the README
// says, is built and vetted. It takes about 80 s alone and far longer on a loaded machine, so it has
// no cap of its own: the run's -timeout bounds it (testctx).
func TestInstall(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	repo := loadRepo(t)
	sandbox, err := repo.NewSandbox(ctx, t.TempDir())
	require.NoError(t, err)
	consumer := t.TempDir()
	published := repo.Published()

	for _, m := range published[1:] {
		writeConsumer(t, repo, consumer)
		_, err = sandbox.Go(ctx, consumer, "get", m.Path()+"@"+repo.Version)
		require.NoError(t, err)
		requireVersions(t, repo, consumer, published[0], m)
	}

	writeConsumer(t, repo, consumer)
	get := []string{"get"}
	for _, m := range published {
		get = append(get, m.Path()+"@"+repo.Version)
	}
	_, err = sandbox.Go(ctx, consumer, get...)
	require.NoError(t, err)
	_, err = sandbox.Go(ctx, consumer, "build", "-trimpath", "-o", os.DevNull, ".")
	require.NoError(t, err)
	_, err = sandbox.Go(ctx, consumer, "vet", "-trimpath", ".")
	require.NoError(t, err)
	requireVersions(t, repo, consumer, published...)
}

// requireVersions fails t unless the go.mod in dir requires each of mods at
// VERSION.
func requireVersions(t *testing.T, repo *release.Repo, dir string, mods ...release.Module) {
	t.Helper()
	name := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	f, err := modfile.Parse(name, data, nil)
	require.NoError(t, err)
	got := map[string]string{}
	for _, req := range f.Require {
		got[req.Mod.Path] = req.Mod.Version
	}
	for _, m := range mods {
		require.Equal(t, repo.Version, got[m.Path()], "the consumer's version of %s", m.Path())
	}
}

func loadRepo(t *testing.T) *release.Repo {
	t.Helper()
	root, err := release.FindRoot(".")
	require.NoError(t, err)
	repo, err := release.Load(root)
	require.NoError(t, err)
	return repo
}

// writeConsumer writes the consumer module into dir: a go.mod requiring
// nothing yet, testdata/consumer/main.go, and a go.sum made of the lines of
// every go.sum in the repository, so the third-party modules they pin need
// no checksum database lookup. The go command checks each module it
// downloads against them; lines it does not need are harmless.
func writeConsumer(t *testing.T, repo *release.Repo, dir string) {
	t.Helper()
	gomod := "module example.com/consumer\n\ngo " + repo.Work.Go.Version + "\n"
	var sums []string
	for _, m := range repo.Modules {
		data, err := os.ReadFile(filepath.Join(repo.Dir, filepath.FromSlash(m.Dir), "go.sum"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		sums = append(sums, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	}
	slices.Sort(sums)
	sums = slices.Compact(sums)
	main, err := os.ReadFile(filepath.Join("testdata", "consumer", "main.go"))
	require.NoError(t, err)
	files := map[string]string{"go.mod": gomod, "go.sum": strings.Join(sums, "\n") + "\n", "main.go": string(main)}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
}
