package release

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Bump sets the version of the next release: it writes version to VERSION
// and makes every module requiring one of ours require it at version. It
// changes nothing when version is not a canonical semantic version.
func (r *Repo) Bump(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("%q is not a canonical semantic version such as v0.1.0", version)
	}
	for _, m := range r.Modules {
		if err := bumpModule(r.modDir(m), m.File, version); err != nil {
			return fmt.Errorf("%s/go.mod: %w", m.Dir, err)
		}
	}
	r.Version = version
	return os.WriteFile(filepath.Join(r.Dir, VersionFile), []byte(version+"\n"), 0o644)
}

func bumpModule(dir string, f *modfile.File, version string) error {
	changed := false
	for _, req := range f.Require {
		if isOwn(req.Mod.Path) && req.Mod.Version != version {
			if err := f.AddRequire(req.Mod.Path, version); err != nil {
				return err
			}
			changed = true
		}
	}
	if !changed {
		return nil
	}
	data, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.mod"), data, 0o644)
}
