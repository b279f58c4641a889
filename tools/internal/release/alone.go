package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// BuildAlone builds and vets every published module on its own, as a user's
// go command sees it: in s, with no go.work, the core at VERSION from the
// proxy. The module's go.mod and go.sum are copied aside (-modfile), so
// nothing in the repository changes. -trimpath keeps the build cache keys
// free of the sandbox's paths, so a second run reuses the first's work.
func (r *Repo) BuildAlone(ctx context.Context, s *Sandbox) error {
	for _, m := range r.Published() {
		modfile, err := copyModfile(r.modDir(m), s.ModCache)
		if err != nil {
			return err
		}
		for _, args := range [][]string{
			{"build", "-trimpath", "-modfile=" + modfile, "-o", os.DevNull, "./..."},
			{"vet", "-trimpath", "-modfile=" + modfile, "./..."},
		} {
			if _, err := s.Go(ctx, r.modDir(m), args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckTidy runs `go mod tidy` on a copy of every module's go.mod and go.sum
// in s and reports each module whose files would change. go.sum lines for
// our own modules are left out of the comparison: the sandbox's are hashes
// of the pack, which change with every edit, and a publisher's go.sum
// holds the core's hash only once the core is tagged (docs/releasing.md).
func (r *Repo) CheckTidy(ctx context.Context, s *Sandbox) error {
	var errs []error
	for _, m := range r.Modules {
		gomod, gosum, err := r.tidy(ctx, s, m)
		if err != nil {
			return err
		}
		dir := r.modDir(m)
		if old, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !bytes.Equal(old, gomod) {
			errs = append(errs, fmt.Errorf("%s/go.mod is not tidy (make tidy)", m.Dir))
		}
		if old, _ := os.ReadFile(filepath.Join(dir, "go.sum")); !sameLines(foreignSums(old), foreignSums(gosum)) {
			errs = append(errs, fmt.Errorf("%s/go.sum is not tidy (make tidy)", m.Dir))
		}
	}
	return errors.Join(errs...)
}

// Tidy runs `go mod tidy` on every module in s and writes the result back,
// keeping each go.sum's existing lines for our own modules in place of the
// sandbox's (see CheckTidy).
func (r *Repo) Tidy(ctx context.Context, s *Sandbox) error {
	for _, m := range r.Modules {
		gomod, gosum, err := r.tidy(ctx, s, m)
		if err != nil {
			return err
		}
		dir := r.modDir(m)
		old, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
		sums := append(foreignSums(gosum), ownSums(old)...)
		slices.SortStableFunc(sums, func(a, b string) int { return strings.Compare(sumPath(a), sumPath(b)) })
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
			return err
		}
		if err := writeSums(filepath.Join(dir, "go.sum"), sums); err != nil {
			return err
		}
	}
	return nil
}

// tidy returns what `go mod tidy` makes of m's go.mod and go.sum, working
// on copies.
func (r *Repo) tidy(ctx context.Context, s *Sandbox, m Module) (gomod, gosum []byte, err error) {
	modfile, err := copyModfile(r.modDir(m), s.ModCache)
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.Go(ctx, r.modDir(m), "mod", "tidy", "-modfile="+modfile); err != nil {
		return nil, nil, err
	}
	if gomod, err = os.ReadFile(modfile); err != nil {
		return nil, nil, err
	}
	gosum, err = os.ReadFile(strings.TrimSuffix(modfile, ".mod") + ".sum")
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return gomod, gosum, err
}

func (r *Repo) modDir(m Module) string {
	return filepath.Join(r.Dir, filepath.FromSlash(m.Dir))
}

// copyModfile copies dir's go.mod and go.sum (when there is one) into a new
// directory beside cache and returns the copy of go.mod, for -modfile.
func copyModfile(dir, cache string) (string, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(cache), "modfile")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) && name == "go.sum" {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(tmp, "go.mod"), nil
}

// foreignSums returns the go.sum lines for modules other than ours.
func foreignSums(gosum []byte) []string {
	return filterSums(gosum, false)
}

// ownSums returns the go.sum lines for our modules.
func ownSums(gosum []byte) []string {
	return filterSums(gosum, true)
}

func filterSums(gosum []byte, own bool) []string {
	var out []string
	for _, line := range strings.Split(string(gosum), "\n") {
		if line == "" {
			continue
		}
		if isOwn(sumPath(line)) == own {
			out = append(out, line)
		}
	}
	return out
}

func writeSums(name string, sums []string) error {
	if len(sums) == 0 {
		err := os.Remove(name)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.WriteFile(name, []byte(strings.Join(sums, "\n")+"\n"), 0o644)
}

// sumPath returns the module path a go.sum line is about.
func sumPath(line string) string {
	path, _, _ := strings.Cut(line, " ")
	return path
}

// sameLines reports whether a and b hold the same lines in any order.
func sameLines(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
