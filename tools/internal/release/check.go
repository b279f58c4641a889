package release

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Check reports every way the repository breaks the release rules, joined
// into one error, or nil when it keeps them all:
//
//   - VERSION holds a canonical semantic version ("v0.1.0");
//   - no published module has a replace directive;
//   - every published module other than the core requires the core, and
//     every module requiring one of ours requires it at exactly VERSION;
//   - CHANGELOG.md has a section for VERSION or an [Unreleased] one;
//   - go.work uses every directory holding a go.mod (Load already fails
//     when it uses one that holds none);
//   - go.work and every go.mod declare the same `go` version.
func (r *Repo) Check() error {
	errs := r.checkVersion()
	if len(errs) == 0 { // else each comparison with VERSION would fail too
		errs = append(errs, r.checkRequirements()...)
		errs = append(errs, r.checkChangelog()...)
	}
	errs = append(errs, r.checkPublished()...)
	errs = append(errs, r.checkWorkspace()...)
	errs = append(errs, r.checkGoLines()...)
	return errors.Join(errs...)
}

func (r *Repo) checkVersion() []error {
	if !semver.IsValid(r.Version) || semver.Canonical(r.Version) != r.Version {
		return []error{fmt.Errorf("%s: %q is not a canonical semantic version such as v0.1.0", VersionFile, r.Version)}
	}
	return nil
}

func (r *Repo) checkPublished() []error {
	var errs []error
	for _, m := range r.Published() {
		for _, rep := range m.File.Replace {
			errs = append(errs, fmt.Errorf("%s/go.mod: published module has replace %s => %s (users' go ignores it)", m.Dir, rep.Old.Path, rep.New.Path))
		}
		if m.Path() != CorePath && !requires(m, CorePath) {
			errs = append(errs, fmt.Errorf("%s/go.mod: does not require %s", m.Dir, CorePath))
		}
	}
	return errs
}

// checkRequirements reports every requirement of one of our modules at a
// version other than VERSION, in any module: in the unpublished ones a
// replace makes the version moot, but one version everywhere leaves
// nothing to wonder about.
func (r *Repo) checkRequirements() []error {
	var errs []error
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			if isOwn(req.Mod.Path) && req.Mod.Version != r.Version {
				errs = append(errs, fmt.Errorf("%s/go.mod: requires %s %s, want %s from %s", m.Dir, req.Mod.Path, req.Mod.Version, r.Version, VersionFile))
			}
		}
	}
	return errs
}

func requires(m Module, path string) bool {
	return slices.ContainsFunc(m.File.Require, func(req *modfile.Require) bool { return req.Mod.Path == path })
}

func (r *Repo) checkChangelog() []error {
	data, err := os.ReadFile(filepath.Join(r.Dir, "CHANGELOG.md"))
	if err != nil {
		return []error{err}
	}
	want := []string{"## [Unreleased]", "## [" + r.Version + "]", "## [" + strings.TrimPrefix(r.Version, "v") + "]"}
	for _, line := range strings.Split(string(data), "\n") {
		for _, w := range want {
			if line == w || strings.HasPrefix(line, w+" ") {
				return nil
			}
		}
	}
	return []error{fmt.Errorf("CHANGELOG.md: no section %q or %q", want[0], want[2])}
}

func (r *Repo) checkWorkspace() []error {
	var errs []error
	used := make([]string, 0, len(r.Modules))
	for _, m := range r.Modules {
		used = append(used, m.Dir)
	}
	if !slices.Contains(used, ".") {
		errs = append(errs, errNoCore)
	}
	for _, dir := range r.Found {
		if !slices.Contains(used, dir) {
			errs = append(errs, fmt.Errorf("go.work: does not use ./%s, which holds a go.mod", dir))
		}
	}
	return errs
}

func (r *Repo) checkGoLines() []error {
	if r.Work.Go == nil {
		return []error{errors.New("go.work: no go line")}
	}
	want := r.Work.Go.Version
	var errs []error
	for _, m := range r.Modules {
		switch {
		case m.File.Go == nil:
			errs = append(errs, fmt.Errorf("%s/go.mod: no go line, want go %s as in go.work", m.Dir, want))
		case m.File.Go.Version != want:
			errs = append(errs, fmt.Errorf("%s/go.mod: go %s, want go %s as in go.work", m.Dir, m.File.Go.Version, want))
		}
	}
	return errs
}
