package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// make test ran each module's go test with the whole -timeout
// (GOTESTTIMEOUT, 60m), one module after another, so a hung test in each
// of two modules took two hours to report, well past CI's 90 minutes
// (which kills the run without go test's goroutine dump or FAIL lines).
// GOTESTTIMEOUT is the budget of the whole run: each module gets what is
// left of it. Here the first module's test takes at least 2 s of a 600 s
// budget, so the second module gets at most 598 s; a module that fails
// still ends the run with go test's own FAIL line and a non-zero exit.
func TestMakeTestBudgetIsTheWholeRun(t *testing.T) {
	t.Parallel()
	repo := loadRepo(t)
	dir := t.TempDir()
	module := func(name, test string) string {
		m := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(m, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(m, "go.mod"), []byte("module example.com/"+name+"\n\ngo "+repo.Work.Go.Version+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(m, "m_test.go"), []byte("package m\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\n"+test+"\n"), 0o644))
		return m
	}
	slow := module("slow", "func TestSlow(t *testing.T) { time.Sleep(2 * time.Second) }")
	failing := module("failing", "func TestFails(t *testing.T) { _ = time.Now(); t.Fatal(\"fails\") }")

	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", repo.Dir, "go-test",
		"MODULES="+slow+" "+failing, "GOTESTTIMEOUT=600s", "GOTESTARGS=-count=1")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a failing module fails the run\n%s", out)

	starts := regexp.MustCompile(`==> \[(\d)/2\] \S+: go test -timeout (\d+)s`).FindAllSubmatch(out, -1)
	require.Len(t, starts, 2, "%s", out)
	first, _ := strconv.Atoi(string(starts[0][2]))
	second, _ := strconv.Atoi(string(starts[1][2]))
	require.LessOrEqual(t, first, 600, "%s", out)
	require.LessOrEqual(t, second, first-2, "the second module gets what the first left\n%s", out)
	require.Regexp(t, `==> go test results\n(.*\n)*FAIL\texample.com/failing\t`, string(out), "go test's FAIL line again at the end\n%s", out)
}
