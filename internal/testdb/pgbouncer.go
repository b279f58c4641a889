package testdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bouncer is a PgBouncer in transaction mode on a loopback port, in front
// of the test database.
type Bouncer struct {
	// URL reaches the test database through PgBouncer.
	URL string
	// Version is PgBouncer's, e.g. "1.18.0".
	Version string
	// Prepared is true when PgBouncer keeps protocol-level prepared
	// statements across transactions (1.21 and later, with
	// max_prepared_statements set), so that pgx's cache_statement mode
	// works through it.
	Prepared bool
	// dir holds its configuration and log.
	dir string
}

// bouncerPaths are where pgbouncer is looked for beyond PATH: Debian
// installs it in /usr/sbin, which a non-root PATH often lacks.
var bouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"}

// findBouncer returns the pgbouncer binary, or "" when none is installed.
func findBouncer() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range bouncerPaths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// StartBouncer starts PgBouncer in transaction mode on a free loopback
// port, in front of the test database, and stops it when tb ends. When
// the pgbouncer binary is not installed it returns nil and the reason to
// give for skipping; any other failure fails tb.
func StartBouncer(tb testing.TB) (*Bouncer, string) {
	tb.Helper()
	return StartBouncerFor(tb, URL(tb))
}

// StartBouncerFor is StartBouncer in front of the server serverURL
// reaches (as its user, with its password if it has one) instead of the
// test database.
func StartBouncerFor(tb testing.TB, serverURL string) (*Bouncer, string) {
	tb.Helper()
	bin := findBouncer()
	if bin == "" {
		return nil, "pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run installs it): " +
			"the routes through a transaction-mode pooler are not tested"
	}
	server, err := pgx.ParseConfig(serverURL)
	if err != nil {
		tb.Fatalf("testdb: parse url: %v", err)
	}
	version, err := bouncerVersion(bin)
	if err != nil {
		tb.Fatalf("testdb: %s --version: %v", bin, err)
	}
	dir := bouncerDir(tb)
	b := &Bouncer{Version: version, Prepared: versionAtLeast(version, 1, 21), dir: dir}
	var lastErr error
	for range 5 { // another process may take the free port first
		port, err := FreePort()
		if err != nil {
			tb.Fatalf("testdb: free port: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(b.ini(server, port)), 0o644); err != nil {
			tb.Fatalf("testdb: write pgbouncer.ini: %v", err)
		}
		if lastErr = b.run(tb, bin, dir, port); lastErr == nil {
			u := url.URL{Scheme: "postgres", User: url.User(server.User), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
				Path: "/" + server.Database, RawQuery: "sslmode=disable"}
			b.URL = u.String()
			return b, ""
		}
	}
	tb.Fatalf("testdb: start pgbouncer: %v", lastErr)
	return nil, ""
}

// bouncerDir returns a directory for PgBouncer's files that the user it
// runs as can read: PgBouncer refuses to run as root, so as root it runs
// as nobody.
func bouncerDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("testdb: chmod %s: %v", dir, err)
	}
	return dir
}

// ini is PgBouncer's configuration: every database of the test server,
// logged into as the test user (auth_type any: no client
// authentication), in transaction mode.
func (b *Bouncer) ini(server *pgx.ConnConfig, port int) string {
	target := fmt.Sprintf("host=%s port=%d user=%s", iniValue(server.Host), server.Port, iniValue(server.User))
	if server.Password != "" {
		target += " password=" + iniValue(server.Password)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "[databases]\n* = %s\n\n[pgbouncer]\n", target)
	fmt.Fprintf(&s, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n", port)
	s.WriteString("auth_type = any\npool_mode = transaction\n")
	s.WriteString("max_client_conn = 500\ndefault_pool_size = 10\n")
	if b.Prepared {
		s.WriteString("max_prepared_statements = 200\n")
	}
	return s.String()
}

// watchdog runs PgBouncer ("$0" "$@") and kills it when its stdin, a
// pipe from the test process, closes: at cleanup, and also when the test
// binary dies without cleaning up (a -timeout panic), so that no PgBouncer
// outlives its test. A signal from here would not do: PgBouncer runs as
// another user. The reader gets the pipe as fd 3, since sh gives a
// background command /dev/null as its stdin. The shell exits with
// PgBouncer.
const watchdog = `exec 3<&0; "$0" "$@" </dev/null & pid=$!; (read -r _ <&3; kill "$pid" 2>/dev/null) & wait "$pid"`

// proc is one PgBouncer process.
type proc struct {
	cmd    *exec.Cmd
	alive  io.WriteCloser // closing it ends the process (watchdog)
	exited chan struct{}  // closed once it exited; err is then its error
	err    error
}

// startProc starts PgBouncer (args: the watchdog shell's) writing to log.
func startProc(dir string, args []string, log *os.File) (*proc, error) {
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	alive, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, alive: alive, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the process, killing it if it has not exited within 5s.
func (p *proc) stop() {
	_ = p.alive.Close()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// run starts PgBouncer on port and waits until it accepts connections.
// It is stopped when tb ends. While the test runs, a PgBouncer that exits
// is started again on its port: PgBouncer 1.18 (Debian 12's) crashes on
// some cancel requests ("bad client state", seen in TestChaosPgBouncer),
// and a pooler that dies and comes back is a fault the replicas must
// ride out, not the test's end.
func (b *Bouncer) run(tb testing.TB, bin, dir string, port int) error {
	tb.Helper()
	logPath := filepath.Join(dir, "pgbouncer.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	args := []string{"-c", watchdog, bin}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody")
	}
	args = append(args, filepath.Join(dir, "pgbouncer.ini"))
	p, err := startProc(dir, args, logFile)
	if err != nil {
		_ = logFile.Close()
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(time.Minute); ; { // a hang guard: it exits on a failed bind
		select {
		case <-p.exited:
			_ = logFile.Close()
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("pgbouncer exited (%w): %s", p.err, strings.TrimSpace(string(out)))
		default:
		}
		if listening(logPath, addr) {
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			_ = logFile.Close()
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("pgbouncer did not listen on %s within a minute: %s", addr, strings.TrimSpace(string(out)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := &supervisor{cur: p, done: make(chan struct{})}
	go s.keep(dir, args, logFile)
	tb.Cleanup(func() {
		q, restarts := s.close()
		if tb.Failed() { // say whether PgBouncer was still up, and what it logged
			logTail(tb, logPath, addr, q.exited, &q.err, restarts)
		}
		q.stop()
		_ = logFile.Close()
	})
	return nil
}

// supervisor starts PgBouncer again each time it exits, until close.
type supervisor struct {
	mu       sync.Mutex
	cur      *proc
	restarts int
	closing  bool
	done     chan struct{}
}

// keep waits for the current process to exit and starts another, until
// close; it gives up when a start fails.
func (s *supervisor) keep(dir string, args []string, log *os.File) {
	for {
		s.mu.Lock()
		p := s.cur
		s.mu.Unlock()
		select {
		case <-s.done:
			return
		case <-p.exited:
		}
		_ = p.alive.Close() // its watchdog's reader ends too
		n, err := startProc(dir, args, log)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			n.stop()
			return
		}
		s.cur, s.restarts = n, s.restarts+1
		s.mu.Unlock()
	}
}

// close stops the restarts and returns the current process and how many
// times PgBouncer was started again.
func (s *supervisor) close() (*proc, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	close(s.done)
	return s.cur, s.restarts
}

// logTail logs, for a failed test, whether the PgBouncer on addr had
// exited (with its error) and the end of its log: a replica refused a
// connection to a PgBouncer that had been listening once
// (TestChaosPgBouncer, seen once), and only this says why.
func logTail(tb testing.TB, logPath, addr string, exited <-chan struct{}, waitErr *error, restarts int) {
	state := fmt.Sprintf("still running (started again %d times)", restarts)
	select {
	case <-exited:
		state = fmt.Sprintf("exited before the test ended (%v)", *waitErr)
	default:
	}
	out, _ := os.ReadFile(logPath)
	tb.Logf("testdb: pgbouncer on %s was %s; the end of its log:\n%s", addr, state, out[max(0, len(out)-4096):])
}

// listening reports whether the PgBouncer logging to logPath says it
// listens on addr. A successful dial would not do: until PgBouncer fails
// to bind a port that another process took after FreePort freed it, a
// dial reaches that process (another test's PostgreSQL cluster, seen
// here), and the test would talk to it, or find it gone, through a
// "PgBouncer" that never ran.
func listening(logPath, addr string) bool {
	out, err := os.ReadFile(logPath)
	return err == nil && strings.Contains(string(out), "listening on "+addr+"\n")
}

// bouncerVersion runs pgbouncer --version and returns its version.
func bouncerVersion(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	m := regexp.MustCompile(`PgBouncer (\d+\.\d+(?:\.\d+)?)`).FindSubmatch(out)
	if m == nil {
		return "", errors.New("no version in: " + string(out))
	}
	return string(m[1]), nil
}

// versionAtLeast reports whether a dotted version is at least
// major.minor.
func versionAtLeast(version string, major, minor int) bool {
	parts := strings.Split(version, ".")
	maj, _ := strconv.Atoi(parts[0])
	var mnr int
	if len(parts) > 1 {
		mnr, _ = strconv.Atoi(parts[1])
	}
	return maj > major || maj == major && mnr >= minor
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// iniValue quotes a value of PgBouncer's connection strings when it needs
// it.
func iniValue(s string) string {
	if s != "" && !strings.ContainsAny(s, ` '\`) {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
