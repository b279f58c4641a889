package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Sandbox runs the go command as a user outside the repository does: no
// go.work, our published modules at VERSION from a module proxy. It has a
// module cache of its own, because the module cache treats a version as
// immutable: a pack of v0.1.0 extracted into the shared cache would shadow
// every later pack of v0.1.0, there and in concurrent runs.
type Sandbox struct {
	// Proxy is the directory [Repo.Pack] filled, served as GOPROXY=file://.
	Proxy string
	// ModCache is the sandbox's module cache (GOMODCACHE).
	ModCache string
	env      []string
}

// NewSandbox packs the published modules into dir/proxy and returns a
// Sandbox whose module cache is dir/modcache. Modules that are not ours come
// first from the shared module cache's download directory, read as a
// second file proxy, then from the GOPROXY in effect, so only what is
// missing locally touches the network. Our module path is in GONOSUMDB:
// the checksum database has never seen the pack. Everything in the
// sandbox's cache is writable (-modcacherw), so removing dir removes it.
func (r *Repo) NewSandbox(ctx context.Context, dir string) (*Sandbox, error) {
	s := &Sandbox{Proxy: filepath.Join(dir, "proxy"), ModCache: filepath.Join(dir, "modcache")}
	if err := r.Pack(s.Proxy); err != nil {
		return nil, err
	}
	goenv, err := readGoEnv(ctx)
	if err != nil {
		return nil, err
	}
	proxy := "file://" + filepath.ToSlash(s.Proxy) + ",file://" + filepath.ToSlash(filepath.Join(goenv.GOMODCACHE, "cache", "download"))
	if goenv.GOPROXY != "" {
		proxy += "," + goenv.GOPROXY
	}
	s.env = append(os.Environ(),
		"GOWORK=off",
		"GOPROXY="+proxy,
		"GONOSUMDB="+strings.Trim(goenv.GONOSUMDB+","+CorePath, ","),
		"GOFLAGS="+strings.TrimSpace(goenv.GOFLAGS+" -mod=mod -modcacherw"),
		"GOMODCACHE="+s.ModCache,
	)
	return s, nil
}

// Go runs the go command with args in dir inside the sandbox and returns
// its combined output; the error carries the output too. When ctx ends
// first, the command is killed and the error says so, with ctx's cause
// and how long the command ran, rather than a bare "signal: killed".
func (s *Sandbox) Go(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = s.env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil && ctx.Err() != nil:
		return out, fmt.Errorf("go %s in %s: stopped: %w (after %s; %w)\n%s", strings.Join(args, " "), dir,
			context.Cause(ctx), time.Since(start).Round(time.Millisecond), err, out)
	case err != nil:
		return out, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out, nil
}

type goEnv struct {
	GOMODCACHE, GOPROXY, GONOSUMDB, GOFLAGS string
}

func readGoEnv(ctx context.Context) (goEnv, error) {
	var env goEnv
	out, err := exec.CommandContext(ctx, "go", "env", "-json", "GOMODCACHE", "GOPROXY", "GONOSUMDB", "GOFLAGS").Output()
	if err != nil {
		return env, fmt.Errorf("go env: %w", err)
	}
	err = json.NewDecoder(bytes.NewReader(out)).Decode(&env)
	return env, err
}
