package release

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// CorePath is the module path of the core module, the repository root.
const CorePath = "github.com/pgoutbox/pgoutbox"

// VersionFile names the file at the repository root holding the version
// the next release tags, such as "v0.1.0".
const VersionFile = "VERSION"

// Module is one module of the repository.
type Module struct {
	// Dir is the module's directory relative to the repository root, in
	// slash form: "." for the core.
	Dir string
	// File is its parsed go.mod.
	File *modfile.File
}

// Path returns the module path declared in go.mod.
func (m Module) Path() string { return m.File.Module.Mod.Path }

// Published reports whether users install the module: the core and every
// module under publishers/ (broker publishers) or adapters/ (bridges to
// other libraries, such as Watermill).
func (m Module) Published() bool {
	return m.Dir == "." || strings.HasPrefix(m.Dir, "publishers/") || strings.HasPrefix(m.Dir, "adapters/")
}

// Repo is the repository as the release rules see it.
type Repo struct {
	// Dir is the absolute path of the repository root.
	Dir string
	// Version is the content of the VERSION file, trimmed.
	Version string
	// Work is the parsed go.work.
	Work *modfile.WorkFile
	// Modules holds every module go.work uses, in go.work's order.
	Modules []Module
	// Found lists, in slash form relative to Dir, every directory holding a
	// go.mod, whether go.work uses it or not.
	Found []string
}

// FindRoot returns the nearest directory at or above start holding both
// go.work and VERSION.
func FindRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", err
	}
	for {
		if isFile(filepath.Join(dir, "go.work")) && isFile(filepath.Join(dir, VersionFile)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no directory at or above %s holds go.work and %s", start, VersionFile)
		}
		dir = parent
	}
}

// Load reads VERSION, go.work, the go.mod of every module go.work uses, and
// the list of directories holding a go.mod under dir.
func Load(dir string) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := &Repo{Dir: abs}
	version, err := os.ReadFile(filepath.Join(abs, VersionFile))
	if err != nil {
		return nil, err
	}
	r.Version = strings.TrimSpace(string(version))
	if r.Work, err = parseWork(abs); err != nil {
		return nil, err
	}
	for _, use := range r.Work.Use {
		m, err := loadModule(abs, use.Path)
		if err != nil {
			return nil, err
		}
		r.Modules = append(r.Modules, m)
	}
	r.Found, err = findModules(abs)
	return r, err
}

// Published returns the published modules, the core first.
func (r *Repo) Published() []Module {
	var core, others []Module
	for _, m := range r.Modules {
		switch {
		case m.Dir == ".":
			core = append(core, m)
		case m.Published():
			others = append(others, m)
		}
	}
	return append(core, others...)
}

func parseWork(dir string) (*modfile.WorkFile, error) {
	name := filepath.Join(dir, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork(name, data, nil)
}

func loadModule(root, use string) (Module, error) {
	rel := path.Clean(filepath.ToSlash(use))
	name := filepath.Join(root, filepath.FromSlash(rel), "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return Module{}, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return Module{}, err
	}
	if f.Module == nil {
		return Module{}, fmt.Errorf("%s: no module line", name)
	}
	return Module{Dir: rel, File: f}, nil
}

// findModules lists the directories under root holding a go.mod, skipping
// what the go command skips: testdata, vendor and names starting with "."
// or "_".
func findModules(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && name == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	return dirs, err
}

// isOwn reports whether path is the core's module path or one beneath it.
func isOwn(path string) bool {
	return path == CorePath || strings.HasPrefix(path, CorePath+"/")
}

func isFile(name string) bool {
	info, err := os.Stat(name)
	return err == nil && info.Mode().IsRegular()
}

var errNoCore = errors.New("go.work does not use the repository root")
