package release_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/tools/internal/release"
)

// TestCheckRepository runs make release-check's rules on this repository.
func TestCheckRepository(t *testing.T) {
	t.Parallel()
	require.NoError(t, loadRepo(t).Check())
}

func TestCheck(t *testing.T) {
	t.Parallel()

	// fixture returns the files of a repository that keeps every rule.
	fixture := func() map[string]string {
		return map[string]string{
			"VERSION":      "v0.2.0\n",
			"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n",
			"go.work":      "go 1.26.0\n\nuse (\n\t.\n\t./adapters/y\n\t./publishers/x\n\t./examples\n)\n",
			"go.mod":       "module github.com/pgoutbox/pgoutbox\n\ngo 1.26.0\n",
			"publishers/x/go.mod": "module github.com/pgoutbox/pgoutbox/publishers/x\n\ngo 1.26.0\n\n" +
				"require github.com/pgoutbox/pgoutbox v0.2.0\n",
			"adapters/y/go.mod": "module github.com/pgoutbox/pgoutbox/adapters/y\n\ngo 1.26.0\n\n" +
				"require github.com/pgoutbox/pgoutbox v0.2.0\n",
			"examples/go.mod": "module github.com/pgoutbox/pgoutbox/examples\n\ngo 1.26.0\n\n" +
				"require github.com/pgoutbox/pgoutbox v0.2.0\n\nreplace github.com/pgoutbox/pgoutbox => ../\n",
		}
	}
	check := func(t *testing.T, files map[string]string) error {
		t.Helper()
		dir := t.TempDir()
		for name, data := range files {
			name = filepath.Join(dir, filepath.FromSlash(name))
			require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
			require.NoError(t, os.WriteFile(name, []byte(data), 0o644))
		}
		repo, err := release.Load(dir)
		require.NoError(t, err)
		return repo.Check()
	}

	t.Run("ChangelogSectionForVersion", func(t *testing.T) {
		t.Parallel()
		files := fixture()
		files["CHANGELOG.md"] = "# Changelog\n\n## [0.2.0] - 2026-12-01\n"
		require.NoError(t, check(t, files))
	})

	t.Run("KeepsEveryRule", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, check(t, fixture()))
	})

	broken := []struct {
		name, file, content, want string
	}{
		{"AdapterWithReplace", "adapters/y/go.mod", "module github.com/pgoutbox/pgoutbox/adapters/y\n\ngo 1.26.0\n\n" +
			"require github.com/pgoutbox/pgoutbox v0.2.0\n\nreplace github.com/pgoutbox/pgoutbox => ../..\n",
			"adapters/y/go.mod: published module has replace github.com/pgoutbox/pgoutbox => ../.."},
		{"ChangelogWithoutSection", "CHANGELOG.md", "# Changelog\n\n## [0.1.0]\n", `CHANGELOG.md: no section "## [Unreleased]" or "## [0.2.0]"`},
		{"GoLineDiffers", "examples/go.mod", "module github.com/pgoutbox/pgoutbox/examples\n\ngo 1.25.0\n", "examples/go.mod: go 1.25.0, want go 1.26.0 as in go.work"},
		{"ModuleOutsideWorkspace", "tools/go.mod", "module example.com/tools\n\ngo 1.26.0\n", "go.work: does not use ./tools, which holds a go.mod"},
		{"PublisherWithoutCore", "publishers/x/go.mod", "module github.com/pgoutbox/pgoutbox/publishers/x\n\ngo 1.26.0\n", "publishers/x/go.mod: does not require github.com/pgoutbox/pgoutbox"},
		{"PublisherWithReplace", "publishers/x/go.mod", "module github.com/pgoutbox/pgoutbox/publishers/x\n\ngo 1.26.0\n\n" +
			"require github.com/pgoutbox/pgoutbox v0.2.0\n\nreplace github.com/pgoutbox/pgoutbox => ../..\n",
			"publishers/x/go.mod: published module has replace github.com/pgoutbox/pgoutbox => ../.."},
		{"RequiresOtherVersion", "publishers/x/go.mod", "module github.com/pgoutbox/pgoutbox/publishers/x\n\ngo 1.26.0\n\n" +
			"require github.com/pgoutbox/pgoutbox v0.0.0-00010101000000-000000000000\n",
			"publishers/x/go.mod: requires github.com/pgoutbox/pgoutbox v0.0.0-00010101000000-000000000000, want v0.2.0 from VERSION"},
		{"UnpublishedRequiresOtherVersion", "examples/go.mod", "module github.com/pgoutbox/pgoutbox/examples\n\ngo 1.26.0\n\n" +
			"require github.com/pgoutbox/pgoutbox v0.1.0\n\nreplace github.com/pgoutbox/pgoutbox => ../\n",
			"examples/go.mod: requires github.com/pgoutbox/pgoutbox v0.1.0, want v0.2.0"},
		{"VersionNotCanonical", "VERSION", "0.2\n", `VERSION: "0.2" is not a canonical semantic version`},
	}
	for _, tt := range broken {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := fixture()
			files[tt.file] = tt.content
			err := check(t, files)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.Len(t, strings.Split(err.Error(), "\n"), 1, "only the broken rule is reported")
		})
	}
}

func TestBump(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"VERSION":      "v0.1.0\n",
		"go.work":      "go 1.26.0\n\nuse (\n\t.\n\t./publishers/x\n)\n",
		"go.mod":       "module github.com/pgoutbox/pgoutbox\n\ngo 1.26.0\n",
		"CHANGELOG.md": "## [Unreleased]\n",
		"publishers/x/go.mod": "module github.com/pgoutbox/pgoutbox/publishers/x\n\ngo 1.26.0\n\n" +
			"require (\n\tgithub.com/google/uuid v1.6.0\n\tgithub.com/pgoutbox/pgoutbox v0.1.0\n)\n",
	}
	for name, data := range files {
		name = filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
		require.NoError(t, os.WriteFile(name, []byte(data), 0o644))
	}
	repo, err := release.Load(dir)
	require.NoError(t, err)

	require.Error(t, repo.Bump("0.2"))
	require.NoError(t, repo.Bump("v0.2.0"))

	repo, err = release.Load(dir)
	require.NoError(t, err)
	require.Equal(t, "v0.2.0", repo.Version)
	require.NoError(t, repo.Check())
	gomod, err := os.ReadFile(filepath.Join(dir, "publishers", "x", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "github.com/google/uuid v1.6.0\n")
	require.Contains(t, string(gomod), "github.com/pgoutbox/pgoutbox v0.2.0\n")
}
