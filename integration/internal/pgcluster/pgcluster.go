package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// Cluster is a PostgreSQL cluster of the test's own: its data directory
// lives in a temporary directory, it listens on a loopback port only, and
// it is stopped and removed when the test ends, whether it passed or not.
type Cluster struct {
	// URL reaches the cluster's postgres database as the superuser
	// postgres, without a password.
	URL string
	// Port is the loopback TCP port the cluster listens on.
	Port int

	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string // the temporary directory: data/ and server.log
	cred *syscall.Credential
}

// searchGlob is where the PostgreSQL server binaries are looked for when
// pg_config is not on PATH or names no bindir holding initdb: Debian's
// layout, newest major first (see Find).
const searchGlob = "/usr/lib/postgresql/*/bin"

// Find returns the directory holding initdb and pg_ctl, or "" when
// PostgreSQL's server binaries are not installed.
func Find() string {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	found, _ := filepath.Glob(searchGlob)
	for i := len(found) - 1; i >= 0; i-- { // Glob sorts: newest major last (for 10 and up)
		dirs = append(dirs, found[i])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	return ""
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// Start creates and starts a cluster, registering its removal with
// tb.Cleanup. It skips tb when initdb is not installed. As root it runs
// the server as the OS user postgres, since PostgreSQL refuses to run as
// root. settings are extra server settings ("name=value").
func Start(tb testing.TB, settings ...string) *Cluster {
	tb.Helper()
	bin := Find()
	if bin == "" {
		tb.Skip("pgcluster: PostgreSQL's server binaries (initdb, pg_ctl) are not installed " +
			"(Debian: apt-get install postgresql): the scenarios against a throwaway cluster are not run")
	}
	c := &Cluster{bin: bin}
	if err := c.prepareDir(); err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	tb.Cleanup(c.remove)
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust",
		"--no-locale", "-E", "UTF8", "--no-sync"); err != nil {
		tb.Fatalf("pgcluster: initdb: %v: %s", err, out)
	}
	conf := append([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		"fsync = off", // the machine does not crash in these tests; the server does, and WAL still replays
		"full_page_writes = off",
		"shared_buffers = '32MB'",
		"max_connections = 200",
		"log_min_messages = warning",
		"log_line_prefix = '%m [%p] %a '",
	}, settings...)
	var lastErr error
	for range 5 { // another process may take the free port first
		port, err := testdb.FreePort()
		if err != nil {
			tb.Fatalf("pgcluster: free port: %v", err)
		}
		c.Port = port
		body := strings.Join(append(conf, fmt.Sprintf("port = %d", port)), "\n") + "\n"
		if err := os.WriteFile(filepath.Join(c.dataDir(), "postgresql.auto.conf"), []byte(body), 0o600); err != nil {
			tb.Fatalf("pgcluster: %v", err)
		}
		if err := c.chown(filepath.Join(c.dataDir(), "postgresql.auto.conf")); err != nil {
			tb.Fatalf("pgcluster: %v", err)
		}
		if lastErr = c.Start(); lastErr == nil {
			u := url.URL{Scheme: "postgres", User: url.User("postgres"),
				Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}
			c.URL = u.String()
			return c
		}
	}
	tb.Fatalf("pgcluster: start: %v\n%s", lastErr, c.ServerLog())
	return nil
}

// prepareDir creates the temporary directory, owned by the user the
// server runs as.
func (c *Cluster) prepareDir() error {
	dir, err := os.MkdirTemp("", "pgoutbox-cluster-")
	if err != nil {
		return err
	}
	c.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root, and there is no OS user postgres to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return c.chown(dir)
}

func (c *Cluster) chown(p string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(p, int(c.cred.Uid), int(c.cred.Gid))
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// LogPath is the server log's file.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "server.log") }

// ServerLog returns the server log so far ("" when there is none).
func (c *Cluster) ServerLog() string {
	b, _ := os.ReadFile(c.LogPath())
	return string(b)
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start() error {
	out, err := c.run("pg_ctl", "start", "-D", c.dataDir(), "-l", c.LogPath(), "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("pg_ctl start: %w: %s", err, out)
	}
	return nil
}

// Stop stops the server with pg_ctl's mode ("fast", "immediate").
func (c *Cluster) Stop(mode string) error {
	out, err := c.run("pg_ctl", "stop", "-D", c.dataDir(), "-m", mode, "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w: %s", mode, err, out)
	}
	return nil
}

// RestartImmediate runs `pg_ctl restart -m immediate`: the server stops
// without a checkpoint, as if it crashed, and starts again through crash
// recovery.
func (c *Cluster) RestartImmediate() error {
	out, err := c.run("pg_ctl", "restart", "-D", c.dataDir(), "-l", c.LogPath(), "-m", "immediate", "-w", "-t", "60")
	if err != nil {
		return fmt.Errorf("pg_ctl restart -m immediate: %w: %s", err, out)
	}
	return nil
}

// remove stops the server at once, if it runs, and deletes its files.
func (c *Cluster) remove() {
	if isFile(filepath.Join(c.dataDir(), "postmaster.pid")) {
		_ = c.Stop("immediate")
	}
	_ = os.RemoveAll(c.dir)
}

// run runs one of the cluster's binaries as the server's user, bounded to
// two minutes, and returns its combined output.
func (c *Cluster) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(os.Environ(), "HOME="+c.dir)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s timed out: %w", name, err)
	}
	return strings.TrimSpace(out.String()), err
}

// SetHBA replaces the cluster's pg_hba.conf with lines (each a pg_hba.conf
// record, e.g. "host all app 127.0.0.1/32 scram-sha-256") and reloads the
// server, so that new connections meet the new rules. The cluster starts
// with trust for every user; a test that needs real password checks puts
// its rules first.
func (c *Cluster) SetHBA(lines ...string) error {
	p := filepath.Join(c.dataDir(), "pg_hba.conf")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if err := c.chown(p); err != nil {
		return err
	}
	out, err := c.run("pg_ctl", "reload", "-D", c.dataDir())
	if err != nil {
		return fmt.Errorf("pg_ctl reload: %w: %s", err, out)
	}
	return nil
}
