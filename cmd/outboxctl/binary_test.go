package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// The tests in this file run outboxctl as users do: built with go build
// into a temporary directory and run as a subprocess against the test's
// schema.

// binDir holds the built binary; TestMain removes it.
var binDir string

// built builds outboxctl once per test run and returns its path.
var built = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "outboxctl-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "outboxctl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binCmd returns a command that runs the built outboxctl with args, in an
// environment without DATABASE_URL, PGOUTBOX_SCHEMA and PGOUTBOX_TABLE
// (but with the variables of env, "NAME=value").
func binCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return binCmdEnv(t, nil, args...)
}

// binCmdEnv is binCmd with the further variables env.
func binCmdEnv(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := built()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, schemaEnv+"=") && !strings.HasPrefix(kv, tableEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// bin runs the built outboxctl with args to its end.
func bin(t *testing.T, args ...string) result {
	t.Helper()
	return binEnv(t, nil, args...)
}

// binEnv is bin with the further environment variables env.
func binEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := binCmdEnv(t, env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// binOn runs the built outboxctl's cmd against the test's schema, with the
// connection flags after args.
func binOn(t *testing.T, db *testdb.DB, cmd string, args ...string) result {
	t.Helper()
	return bin(t, append(append([]string{cmd}, args...), "-url", db.URL, "-schema", db.Schema)...)
}

// binOK is binOn for a run that must succeed.
func binOK(t *testing.T, db *testdb.DB, cmd string, args ...string) result {
	t.Helper()
	r := binOn(t, db, cmd, args...)
	require.Equal(t, 0, r.code, "%s %v: %s", cmd, args, r.stderr)
	return r
}

func TestBinaryFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insert(t, db, "FAILED", "order.created", 1)[0].String()

	for _, args := range [][]string{
		{"inspect", id, "-url", db.URL, "-schema", db.Schema},
		{"inspect", "-url", db.URL, id, "-schema", db.Schema, "-json"},
		{"inspect", "-url", db.URL, "-schema", db.Schema, "--", id},
	} {
		r := bin(t, args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stdout, "order.created")
	}

	r := bin(t, "inspect", id, id, "-url", db.URL, "-schema", db.Schema)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "give one event id")
	require.Contains(t, r.stderr, "usage: outboxctl inspect <id> [flags]")
	r = bin(t, "counts", "extra", "-url", db.URL, "-schema", db.Schema)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unexpected argument "extra"`)
}

func TestBinaryHelpShowsNoMeaninglessDefault(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		r := bin(t, c.name, "-h")
		require.Equal(t, 0, r.code)
		require.NotContains(t, r.stderr, "(default -", c.name)
		require.Contains(t, r.stderr, "usage: "+c.synopsis())
	}
	r := bin(t, "purge", "-h")
	require.Regexp(t, `-older-than duration\n\s+purge events .*\(required\)\n`, r.stderr)
}

func TestBinaryUnknownCodeRejected(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "FAILED", "a", 2)

	for _, args := range [][]string{
		{"replay", "-code", "handler_eror", "-yes"},
		{"list", "-code", "handler_eror"},
	} {
		r := binOn(t, db, args[0], args[1:]...)
		require.Equal(t, 2, r.code, "%v", args)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, `-code "handler_eror" is not an error code`)
		for _, c := range knownCodes {
			require.Contains(t, r.stderr, string(c))
		}
	}
	require.Equal(t, 2, count(t, db, "FAILED"), "nothing was replayed")

	r := binOK(t, db, "replay", "-code", "HANDLER_ERROR", "-yes")
	require.Contains(t, r.stdout, "2 events replayed")
}

func TestBinaryInspectTruncatesPayload(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insert(t, db, "PENDING", "a", 1)[0]
	payload := strings.Repeat("é", 5<<20/2) // 5 MiB of two-byte characters
	updateAll(t, db, "UPDATE outbox_events SET payload = $1", []byte(payload))

	r := binOK(t, db, "inspect", id.String())
	require.Contains(t, r.stdout, fmt.Sprintf("payload (%d bytes, the first %d shown; -full shows all):\n", len(payload), payloadShown))
	require.True(t, strings.HasSuffix(r.stdout, "\n"+payload[:payloadShown]+"\n"))
	require.Less(t, len(r.stdout), 2*payloadShown)

	r = binOK(t, db, "inspect", id.String(), "-full")
	require.True(t, strings.HasSuffix(r.stdout, fmt.Sprintf("payload (%d bytes):\n%s\n", len(payload), payload)), "the whole payload")

	var d struct {
		Payload     []byte
		PayloadSize int  `json:"payload_size"`
		Truncated   bool `json:"payload_truncated"`
	}
	r = binOK(t, db, "inspect", id.String(), "-json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Len(t, d.Payload, payloadShown)
	require.True(t, bytes.Equal([]byte(payload[:payloadShown]), d.Payload))
	require.Equal(t, len(payload), d.PayloadSize)
	require.True(t, d.Truncated)
	r = binOK(t, db, "inspect", id.String(), "-json", "-full")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Len(t, d.Payload, len(payload))
	require.True(t, bytes.Equal([]byte(payload), d.Payload))
	require.False(t, d.Truncated)
}

func TestBinaryOneEventIsSingular(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "FAILED", "a", 1)
	insert(t, db, "SENT", "a", 1)

	require.Contains(t, binOK(t, db, "list", "-status", "failed").stdout, "\n1 event; no more pages\n")
	require.Contains(t, binOK(t, db, "list", "-limit", "1").stdout, "\n1 event; next page: -after ")
	require.Contains(t, binOK(t, db, "replay").stdout, "would replay 1 FAILED event in ")
	require.Contains(t, binOK(t, db, "replay", "-yes").stdout, "\n1 event replayed, 0 skipped\n")
	require.Contains(t, binOK(t, db, "purge", "-status", "sent", "-older-than", "1m").stdout, "would delete 1 SENT event older than")
	require.Contains(t, binOK(t, db, "purge", "-status", "sent", "-older-than", "1m", "-yes").stdout, "deleted 1 SENT event older than")
	require.Contains(t, binOK(t, db, "purge", "-status", "sent", "-older-than", "1m", "-yes").stdout, "deleted 0 SENT events older than")
}

func TestBinaryListFilters(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insert(t, db, "FAILED", "a", 3)
	insert(t, db, "PENDING", "a", 1)
	updateAll(t, db, `UPDATE outbox_events SET aggregate_id = 'o-1' WHERE id = ANY($1)`, ids[:2])
	updateAll(t, db, `UPDATE outbox_events SET last_error_code = 'publish_error' WHERE id = $1`, ids[1])

	r := binOK(t, db, "list", "-aggregate-id", "o-1")
	require.Contains(t, r.stdout, ids[0].String())
	require.Contains(t, r.stdout, ids[1].String())
	require.Contains(t, r.stdout, "2 events; no more pages")

	r = binOK(t, db, "list", "-code", "handler_error")
	require.Contains(t, r.stdout, ids[0].String())
	require.Contains(t, r.stdout, ids[2].String())
	require.Contains(t, r.stdout, "2 events; no more pages")

	r = binOK(t, db, "list", "-code", "publish_error", "-aggregate-id", "o-1", "-json")
	var page struct{ Events []struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Events, 1)
	require.Equal(t, ids[1].String(), page.Events[0].ID)
}

func TestBinaryVerifyNamesTheFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	migrateCmd := func(db *testdb.DB) string {
		return fmt.Sprintf("outboxctl migrate -schema %s -table outbox_events", db.Schema)
	}

	t.Run("Behind", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		downLatest(t, db)
		r := binOn(t, db, "verify")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stdout, "to fix: run `"+migrateCmd(db)+"`")
		require.NotContains(t, r.stdout, "(run Migrate)")
		require.Contains(t, r.stdout, "(run outboxctl migrate)")

		r = binOn(t, db, "verify", "-json")
		var v struct {
			OK       bool
			Problems []struct{ Object, Actual string }
			Fix      string
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
		require.Contains(t, v.Fix, migrateCmd(db))
		last := v.Problems[len(v.Problems)-1]
		require.Contains(t, last.Object, "version table")
		require.Equal(t, fmt.Sprintf("%d (run outboxctl migrate)", migrations.Latest()-1), last.Actual)

		// The command named works as printed.
		fix := strings.Fields(regexpFind(t, "to fix: run `([^`]+)`", binOn(t, db, "verify").stdout))
		require.Equal(t, "outboxctl", fix[0])
		r = bin(t, append(fix[1:], "-url", db.URL)...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, binOK(t, db, "verify").stdout, "matches schema version")
	})

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		r := binOn(t, db, "verify")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stdout, "to fix: run `"+migrateCmd(db)+"`")
	})

	// Three states migrate does not repair: verify says so and names no
	// migrate command.
	for name, tc := range map[string]struct{ change, fix string }{
		"NoVersion":     {"DROP TABLE outbox_events_schema_version", "the table exists but has no schema version"},
		"ChangedByHand": {"DROP INDEX outbox_events_held_idx", fmt.Sprintf("the table is at schema version %d but its objects differ", migrations.Latest())},
		"Newer": {"UPDATE outbox_events_schema_version SET version = version + 1",
			fmt.Sprintf("the table is at schema version %d, newer than this outboxctl knows", migrations.Latest()+1)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t)
			_, err := db.Pool.Exec(ctx, tc.change)
			require.NoError(t, err)
			r := binOn(t, db, "verify")
			require.Equal(t, 1, r.code)
			require.Contains(t, r.stdout, "to fix: "+tc.fix)
			require.NotContains(t, r.stdout, "run `outboxctl migrate")
			require.Contains(t, r.stderr, "does not match: 1 problem\n")
		})
	}
}

// downLatest undoes the latest migration with the down file of
// migrations.Render, leaving the outbox one schema version behind.
func downLatest(t *testing.T, db *testdb.DB) {
	t.Helper()
	fsys, err := migrations.Render(migrations.Config{Table: db.Table()})
	require.NoError(t, err)
	downs, err := fs.Glob(fsys, "*.down.sql")
	require.NoError(t, err)
	sql, err := fs.ReadFile(fsys, downs[len(downs)-1])
	require.NoError(t, err)
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), string(sql))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(context.Background()))
}

func TestBinaryStatus(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "PENDING", "order.created", 2)
	insert(t, db, "SENT", "order.created", 3)
	insert(t, db, "FAILED", "invoice.issued", 1)
	insert(t, db, "PROCESSING", "invoice.issued", 1)
	_, err := db.Pool.Exec(context.Background(), "UPDATE outbox_events SET created_at = now() - interval '2 hours' WHERE status = 'PENDING'")
	require.NoError(t, err)

	r := binOK(t, db, "status")
	require.Regexp(t, `(?m)^PENDING\s+2$`, r.stdout)
	require.Regexp(t, `(?m)^total\s+7$`, r.stdout)
	require.Regexp(t, `oldest PENDING event: created 2h0m\d+(\.\d+)?s ago\n`, r.stdout)
	require.Contains(t, r.stdout, "oldest due event: waiting for ")
	require.Regexp(t, `(?m)^TYPE\s+PENDING\s+DUE\s+PROCESSING\s+SENT\s+FAILED$`, r.stdout)
	require.Regexp(t, `(?m)^invoice\.issued\s+0\s+0\s+1\s+0\s+1$`, r.stdout)
	require.Regexp(t, `(?m)^order\.created\s+2\s+2\s+0\s+3\s+0$`, r.stdout)
	require.Regexp(t, `(?m)^handler_error\s+1$`, r.stdout)

	r = binOK(t, db, "status", "-json")
	var s struct {
		Counts       struct{ Pending, Sent int64 }
		ByType       []struct{ Type string } `json:"by_type"`
		FailedByCode []struct {
			Code  string
			Count int64
		} `json:"failed_by_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.Equal(t, int64(2), s.Counts.Pending)
	require.Len(t, s.ByType, 2)
	require.Equal(t, "handler_error", s.FailedByCode[0].Code)

	for _, args := range [][]string{{"-watch", "-interval", "10ms"}, {"-interval", "5s"}} {
		r := binOn(t, db, "status", args...)
		require.Equal(t, 2, r.code, "%v", args)
		require.Empty(t, r.stdout)
	}
}

// TestBinaryStatusWatch watches the table, adds events after the first
// frame, waits for a frame that shows them and interrupts the watch.
func TestBinaryStatusWatch(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "PENDING", "a", 1)

	cmd := binCmd(t, "status", "-watch", "-interval", "1s", "-url", db.URL, "-schema", db.Schema)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := readLines(stdout)

	waitFor(t, lines, `^PENDING\s+1$`)
	insert(t, db, "PENDING", "a", 2)
	waitFor(t, lines, `^PENDING\s+3$`)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	for range lines { // drain to the end
	}
	require.NoError(t, cmd.Wait(), stderr.String())
	require.Empty(t, stderr.String())
}

// readLines sends r's lines on the returned channel until r ends.
func readLines(r io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return lines
}

// waitFor reads lines until one matches pattern; it fails if they end
// first or the test's context ends.
func waitFor(t *testing.T, lines <-chan string, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "output ended before a line matched %q", pattern)
			if re.MatchString(l) {
				return
			}
		case <-t.Context().Done():
			t.Fatalf("no line matched %q", pattern)
		}
	}
}

// TestBinaryPasswordNeverPrinted runs the new commands and outputs with a
// password in -url, against a server that accepts it (with trust
// authentication) or none, and a schema that is not migrated.
func TestBinaryPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const pw = "Hunter2-s3cret"
	u := mustURL(t, db.URL)
	u.User = url.UserPassword(u.User.Username(), pw)
	dead := *u
	dead.Host = "127.0.0.1:1"

	for _, raw := range []string{u.String(), dead.String()} {
		for _, args := range [][]string{
			{"status", "-url", raw},
			{"status", "-watch", "-json", "-url", raw},
			{"verify", "-url", raw},
			{"verify", "-json", "-url", raw},
			{"replay", "-code", "nope", "-url", raw},
		} {
			r := bin(t, append(args, "-schema", db.Schema)...)
			require.NotEqual(t, 0, r.code, "%v", args)
			require.NotContains(t, r.stdout+r.stderr, pw, "%v", args)
			require.NotContains(t, r.stdout+r.stderr, url.QueryEscape(pw), "%v", args)
		}
	}
}

// The built binary lists a blocked key, skips its head only with -yes
// (ids as arguments, flags after them), and then lists no key; a head it
// cannot skip exits 1 and changes nothing.
func TestBinaryBlockedAndSkip(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	head := insertKeyed(t, db, "FAILED", "order-7").String()
	next := insertKeyed(t, db, "FAILED", "order-7").String()
	insertKeyed(t, db, "PENDING", "order-7")

	require.Regexp(t, `(?m)^order-7\s+`+head+`\s+a\s+handler_error\s+\S+\s+2$`, binOK(t, db, "blocked").stdout)
	require.Contains(t, binOK(t, db, "skip", head).stdout, "dry run: would skip 1 FAILED event in ")
	r := binOn(t, db, "skip", head, uuid.NewString(), "-yes")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "not found")
	require.Contains(t, binOK(t, db, "skip", head, "-yes").stdout, "\n1 event skipped; they stay FAILED, and their keys go on\n")
	require.Regexp(t, `(?m)^order-7\s+`+next+`\s+`, binOK(t, db, "blocked").stdout, "the next FAILED event heads the key")
	require.Contains(t, binOK(t, db, "skip", next, "-yes", "-json").stdout, `"skipped": [`)
	require.Contains(t, binOK(t, db, "blocked").stdout, "0 blocked keys; no more pages")
}

// On a table without the order index (migrated without -key-order) no
// key is blocked: blocked says per-key ordering is off, in words and in
// JSON, and status counts every due event as due now. outboxctl migrate
// -key-order builds the index, and the key is blocked.
func TestBinaryBlockedWithoutOrderIndex(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertKeyed(t, db, "FAILED", "order-7")
	insertKeyed(t, db, "PENDING", "order-7")

	r := binOK(t, db, "blocked")
	require.Contains(t, r.stdout, "blocked keys not computed for "+db.Schema+".outbox_events: the table has no valid order index")
	require.Contains(t, binOK(t, db, "blocked", "-json").stdout, `"key_order_off": true`)
	require.Regexp(t, `(?m)^  due now\s+1$`, binOK(t, db, "status").stdout)

	binOK(t, db, "migrate", "-key-order")
	require.Regexp(t, `(?m)^order-7\s+`, binOK(t, db, "blocked").stdout)
}

// snapshot is every row's id, status and write counters: what a command
// that writes nothing must leave as it was.
func snapshot(t *testing.T, db *testdb.DB) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(
		id::text || ' ' || status || ' ' || attempts || ' ' || next_attempt_at::text || ' ' || coalesce(skipped_at::text, '-'),
		E'\n' ORDER BY seq), '') FROM `+allRows+` AS o`).Scan(&s))
	return s
}

// Every numeric flag of every command is checked against its documented
// range before any statement runs: each bad value (0 included where 0 is
// out of range) exits 2 with a message that names the flag and its range,
// and leaves every row as it was (issue 24: "-limit 0" deleted 10,000
// rows, read as admin's default).
func TestBinaryNumericFlagRanges(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "FAILED", "a", 3)
	insert(t, db, "SENT", "a", 3)
	insert(t, db, "PENDING", "a", 1)
	before := snapshot(t, db)

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"list", "-limit", "0"}, "-limit must be 1–1000, got 0"},
		{[]string{"list", "-limit", "-5"}, "-limit must be 1–1000, got -5"},
		{[]string{"list", "-limit", "1001"}, "-limit must be 1–1000, got 1001"},
		{[]string{"blocked", "-limit", "0"}, "-limit must be 1–1000, got 0"},
		{[]string{"blocked", "-limit", "1001"}, "-limit must be 1–1000, got 1001"},
		{[]string{"replay", "-yes", "-code", "handler_error", "-limit", "0"}, "-limit must be 1–10000, got 0"},
		{[]string{"replay", "-yes", "-limit", "-5"}, "-limit must be 1–10000, got -5"},
		{[]string{"replay", "-yes", "-limit", "10001"}, "-limit must be 1–10000, got 10001"},
		{[]string{"purge", "-yes", "-status", "sent", "-older-than", "0s", "-limit", "0"}, "-limit must be 1–100000, got 0"},
		{[]string{"purge", "-yes", "-status", "sent", "-older-than", "0s", "-limit", "-5"}, "-limit must be 1–100000, got -5"},
		{[]string{"purge", "-yes", "-status", "sent", "-older-than", "0s", "-limit", "100001"}, "-limit must be 1–100000, got 100001"},
		{[]string{"purge", "-yes", "-status", "failed", "-older-than", "-5h"}, "-older-than must be at least 0s, got -5h0m0s"},
		{[]string{"status", "-watch", "-interval", "500ms"}, "-interval must be at least 1s, got 500ms"},
		{[]string{"status", "-watch", "-interval", "0s"}, "-interval must be at least 1s, got 0s"},
	}
	for _, c := range cases {
		r := binOn(t, db, c.args[0], c.args[1:]...)
		require.Equal(t, 2, r.code, "%v: stdout %q stderr %q", c.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, "outboxctl "+c.args[0]+": "+c.want+"\n", "%v", c.args)
		require.Empty(t, r.stdout, "%v", c.args)
		require.Equal(t, before, snapshot(t, db), "%v wrote", c.args)
	}
}

// Without -schema and -table the table comes from PGOUTBOX_SCHEMA and
// PGOUTBOX_TABLE, which -h names without showing their values; a flag
// wins over its variable.
func TestBinaryTableFromEnv(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "FAILED", "a", 2)

	env := []string{schemaEnv + "=" + db.Schema, tableEnv + "=outbox_events"}
	r := binEnv(t, env, "counts", "-url", db.URL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^FAILED\s+2$`, r.stdout)
	require.Contains(t, r.stdout, db.Schema+".outbox_events")

	r = binEnv(t, []string{schemaEnv + "=nope_missing"}, "counts", "-url", db.URL, "-schema", db.Schema)
	require.Equal(t, 0, r.code, r.stderr)

	r = binEnv(t, env, "counts", "-h")
	require.Contains(t, r.stderr, "(default $"+schemaEnv+", else public)")
	require.Contains(t, r.stderr, "(default $"+tableEnv+", else outbox_events)")
	require.NotContains(t, r.stderr, db.Schema)
}

// A command run on a table that does not exist says which table it
// looked for and what to set, instead of a bare SQLSTATE 42P01.
func TestBinaryMissingTableSaysWhatToSet(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	for _, cmd := range []string{"counts", "status", "list", "blocked", "purge -status sent -older-than 1h"} {
		args := strings.Fields(cmd)
		r := bin(t, append(args, "-url", db.URL, "-schema", "nope_missing")...)
		require.Equal(t, 1, r.code, "%s: %s", cmd, r.stderr)
		require.Contains(t, r.stderr, "nope_missing.outbox_events does not exist", cmd)
		require.Contains(t, r.stderr, "set -schema and -table (or "+schemaEnv+" and "+tableEnv+") to the outbox table, or create it with outboxctl migrate", cmd)
	}
}

// replay takes event ids as arguments, as inspect and skip do.
func TestBinaryReplayIDArguments(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insert(t, db, "FAILED", "a", 3)

	require.Contains(t, binOK(t, db, "replay", ids[0].String(), ids[1].String()).stdout, "dry run: would replay 2 FAILED events")
	require.Equal(t, 3, count(t, db, "FAILED"))
	r := binOK(t, db, "replay", ids[0].String(), "-yes", "-id", ids[1].String())
	require.Contains(t, r.stdout, "2 events replayed, 0 skipped")
	require.Equal(t, 1, count(t, db, "FAILED"))

	for _, args := range [][]string{{"replay", "nope"}, {"replay", ids[2].String(), "-code", "timeout"}, {"replay", ids[2].String(), "-limit", "5"}} {
		r := binOn(t, db, args[0], args[1:]...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "usage: outboxctl replay [<id>...] [flags]", "%v", args)
	}
	require.Equal(t, 1, count(t, db, "FAILED"))
}

// Due events behind a FAILED head of their order key are not shown as
// "due now" by status and counts: they are counted apart, as blocked,
// until the head is replayed or skipped.
func TestBinaryStatusBlockedNotDue(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	head := insertKeyed(t, db, "FAILED", "order-7")
	insertKeyed(t, db, "PENDING", "order-7")
	insertKeyed(t, db, "PENDING", "order-7")
	insertKeyed(t, db, "PENDING", "order-8")
	insert(t, db, "PENDING", "a", 1)

	for _, cmd := range []string{"status", "counts"} {
		r := binOK(t, db, cmd)
		require.Regexp(t, `(?m)^PENDING\s+4$`, r.stdout, cmd)
		require.Regexp(t, `(?m)^  due now\s+2$`, r.stdout, cmd)
		require.Regexp(t, `(?m)^  blocked\s+2$`, r.stdout, cmd)
		require.Contains(t, r.stdout, "blocked: due, behind a FAILED event of their order key (outboxctl blocked)", cmd)
	}
	var c struct {
		Due        int64
		DueBlocked int64 `json:"due_blocked"`
	}
	require.NoError(t, json.Unmarshal([]byte(binOK(t, db, "counts", "-json").stdout), &c))
	require.Equal(t, int64(4), c.Due)
	require.Equal(t, int64(2), c.DueBlocked)

	binOK(t, db, "skip", head.String(), "-yes")
	r := binOK(t, db, "status")
	require.Regexp(t, `(?m)^  due now\s+4$`, r.stdout)
	require.NotContains(t, r.stdout, "blocked")
}

// An input the admin package refuses is reported under the flag that
// carried it, not under the Go field (issue 24: "OlderThan is -5h0m0s").
func TestBinaryAdminInputErrorsNameFlags(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"blocked", "-after", "a\xff"}, "outboxctl blocked: -after is not valid UTF-8\n"},
		{[]string{"list", "-type", "a\xff"}, "outboxctl list: -type is not valid UTF-8\n"},
		{[]string{"list", "-aggregate-id", "a\xff"}, "outboxctl list: -aggregate-id is not valid UTF-8\n"},
		{[]string{"replay", "-type", "a\xff"}, "outboxctl replay: -type is not valid UTF-8\n"},
	} {
		r := binOn(t, db, c.args[0], c.args[1:]...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, "%v", c.args)
	}
}
