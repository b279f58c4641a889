package release

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Pack writes every published module of the working tree, at r.Version,
// into dir laid out as the module proxy protocol serves it, so that
// GOPROXY=file://dir resolves them: for each module,
// <escaped path>/@v/list, and <version>.info, .mod and .zip. The zip holds
// the module directory as it is now, committed or not, minus nested
// modules and VCS directories, as golang.org/x/mod/zip builds it for the
// go command.
func (r *Repo) Pack(dir string) error {
	for _, m := range r.Published() {
		if err := r.packModule(dir, m); err != nil {
			return fmt.Errorf("pack %s %s: %w", m.Path(), r.Version, err)
		}
	}
	return nil
}

func (r *Repo) packModule(dir string, m Module) error {
	mv := module.Version{Path: m.Path(), Version: r.Version}
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(r.Dir, filepath.FromSlash(m.Dir))
	if err := writeZip(filepath.Join(vdir, r.Version+".zip"), mv, src); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{r.Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"list":              []byte(r.Version + "\n"),
		r.Version + ".info": info,
		r.Version + ".mod":  gomod,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func writeZip(name string, mv module.Version, src string) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return zip.CreateFromDir(f, mv, src)
}
