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
// left of it when it starts. make test runs the first module in one lane
// and the second in another, then each lane takes the next module as it
// comes free (.ci/gotest). Here the first two modules' tests take at
// least 2 s each of a 600 s budget, so the third, which starts only when
// one of them ends, gets at most 598 s; a module that fails still ends
// the run with go test's own FAIL line and a non-zero exit, and
// GOTEST_LANES=1 runs them one after another. MODULES given to make is
// exactly what runs (the repository's own modules would run too if the
// Makefile added its root: it did once, and this test ran the root
// module's tests inside make test).
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
	first := module("first", "func TestFirst(t *testing.T) { time.Sleep(2 * time.Second) }")
	slow := module("slow", "func TestSlow(t *testing.T) { time.Sleep(2 * time.Second) }")
	failing := module("failing", "func TestFails(t *testing.T) { _ = time.Now(); t.Fatal(\"fails\") }")

	for _, lanes := range []string{"2", "1"} {
		t.Run("lanes="+lanes, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", repo.Dir, "go-test",
				"MODULES="+first+" "+slow+" "+failing, "GOTESTTIMEOUT=600s", "GOTESTARGS=-count=1", "GOTEST_LANES="+lanes)
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOPROXY=off")
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "a failing module fails the run\n%s", out)

			timeouts := map[string]int{}
			for _, m := range regexp.MustCompile(`==> \[\d/3\] \S+/(\w+): go test -timeout (\d+)s`).FindAllSubmatch(out, -1) {
				timeouts[string(m[1])], _ = strconv.Atoi(string(m[2]))
			}
			require.Len(t, timeouts, 3, "only the modules given run\n%s", out)
			require.LessOrEqual(t, timeouts["first"], 600, "%s", out)
			require.LessOrEqual(t, timeouts["failing"], timeouts["slow"]-2, "the module after the slow ones gets what they left\n%s", out)
			require.Regexp(t, `==> go test results\n(.*\n)*FAIL\texample.com/failing\t`, string(out), "go test's FAIL line again at the end\n%s", out)
			require.Regexp(t, `==> summary: 3 modules`, string(out), "%s", out)
		})
	}
}
