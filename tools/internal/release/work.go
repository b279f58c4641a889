package release

import (
	"path/filepath"
	"strings"
)

// WorkReplaces returns a replace block for a go.work outside the
// repository: each published module at VERSION replaced by its directory
// in this checkout. A go.work that uses the checkout's modules needs it
// when another module of the workspace requires one of them at VERSION
// before that version is published: the go command still reads the
// required version's go.mod from the module proxy, which answers 403 (or
// 404) for a version it does not have. See docs/testing.md.
func (r *Repo) WorkReplaces() string {
	var b strings.Builder
	b.WriteString("replace (\n")
	for _, m := range r.Published() {
		b.WriteString("\t" + m.Path() + " " + r.Version + " => " + filepath.Join(r.Dir, filepath.FromSlash(m.Dir)) + "\n")
	}
	b.WriteString(")\n")
	return b.String()
}
