// Command outboxctl is the operator's command line for a pgoutbox outbox:
// status, counts, list, inspect, replay, blocked, skip, purge, audit,
// migrate and verify, serve (the operator console in the browser,
// admin/console), and relay for a log's consumer groups (groups, parked
// keys, replay/skip requests, resume, group create/drop, maintain). It is
// a thin layer over the admin and migrations packages; docs/admin.md is
// its guide.
//
//	outboxctl <command> [arguments and flags, in any order]
//
// Every command takes -url (default $DATABASE_URL), -schema (default
// $PGOUTBOX_SCHEMA, else public), -table (default $PGOUTBOX_TABLE, else
// outbox_events) and -json. Numeric flags are checked against their
// ranges before anything connects. replay, skip and purge change nothing without -yes: they print
// what they would do; with it each writes an audit row naming $USER@host
// (outboxctl audit lists them). Exit status: 0 success (also for status -watch ended by
// an interrupt), 1 failure (including a schema that does not verify), 2
// bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// The environment variables that name the outbox table when -schema or
// -table is not given.
const (
	schemaEnv = "PGOUTBOX_SCHEMA"
	tableEnv  = "PGOUTBOX_TABLE"
)

// connectTimeout bounds the connection attempt when the URL sets none.
const connectTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its flags are added to the common ones, and
// exec runs it on an open connection.
type command struct {
	name, args, summary string
	flags               func(fs *flag.FlagSet) func(*env) error
}

// env is what a command runs with.
type env struct {
	ctx   context.Context
	url   string
	conn  *pgx.Conn // nil until connect
	table outbox.Table
	json  bool
	args  []string // the positional arguments
	out   io.Writer
	tty   bool // out is a terminal
}

var commands = []command{
	{"status", "", "counts by status and type, oldest pending, failed by code (-watch to redraw)", statusFlags},
	{"counts", "", "rows per status, the age of the oldest due event, and PENDING rows by type", countsFlags},
	{"list", "", "list events, a page at a time (keyset by seq)", listFlags},
	{"inspect", "<id>", "show one event in full: payload, headers, attempt log", inspectFlags},
	{"replay", "[<id>...]", "return FAILED events to PENDING, by id or by filter (dry run without -yes)", replayFlags},
	{"blocked", "", "keys held by a FAILED head event (per-key ordering, head policy BlockKey)", blockedFlags},
	{"skip", "<id>...", "mark FAILED head events skipped so their keys go on (dry run without -yes)", skipFlags},
	{"purge", "", "delete old SENT or FAILED events (dry run without -yes)", purgeFlags},
	{"audit", "", "the audit log: who replayed, skipped or purged what, newest first", auditFlags},
	{"migrate", "", "create or upgrade the outbox table", migrateFlags},
	{"verify", "", "check the outbox table against this version of pgoutbox", verifyFlags},
	{"serve", "", "run the operator console in the browser (read-only unless -allow-actions; see docs/console.md)", serveFlags},
	{"relay", relayArgs, "a log's consumer groups, lag, parked keys, replay/skip requests, retention (-table names the log)", relayFlags},
}

const usageLine = "usage: outboxctl <command> [arguments] [flags]"

func usage(w io.Writer) {
	fmt.Fprintln(w, usageLine)
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery command takes -url (default $DATABASE_URL), -schema (default $"+schemaEnv+", else "+outbox.DefaultSchema+"),")
	fmt.Fprintln(w, "-table (default $"+tableEnv+", else "+outbox.DefaultTable+") and -json.")
	fmt.Fprintln(w, "Run outboxctl <command> -h for the command's flags.")
}

// usageError is a bad flag or argument: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run is the whole program, minus the process: it parses args (without the
// program name), runs the command and returns the exit status. Everything
// it writes goes through a filter that blanks the URL's password.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return exitOK
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "outboxctl: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	cmd := commands[i]

	fs := flag.NewFlagSet("outboxctl "+cmd.name, flag.ContinueOnError)
	// The default is read after parsing, so that usage text never shows
	// the environment's URL.
	url := fs.String("url", "", "PostgreSQL `URL` or keyword/value DSN (default $DATABASE_URL)")
	schema := fs.String("schema", "", "`schema` of the outbox table (default $"+schemaEnv+", else "+outbox.DefaultSchema+")")
	table := fs.String("table", "", "`name` of the outbox table (default $"+tableEnv+", else "+outbox.DefaultTable+")")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	exec := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n%s\n\nflags:\n", cmd.synopsis(), cmd.summary)
		fs.PrintDefaults()
	}

	// Blank the password of every URL the program may see, before the
	// first byte is written: flag errors echo bad values too.
	secrets := passwords(append(urlArgs(args), os.Getenv("DATABASE_URL")))
	tty := isTerminal(stdout)
	stdout, stderr = &redactor{w: stdout, secrets: secrets}, &redactor{w: stderr, secrets: secrets}
	fs.SetOutput(stderr)
	positional, err := parse(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *url == "" {
		*url = os.Getenv("DATABASE_URL")
	}
	if !flagSet(fs, "schema") {
		*schema = os.Getenv(schemaEnv)
	}
	if !flagSet(fs, "table") {
		*table = os.Getenv(tableEnv)
	}

	e := &env{ctx: ctx, url: *url, table: outbox.Table{Schema: *schema, Name: *table}, json: *asJSON,
		args: positional, out: stdout, tty: tty}
	defer e.close()
	err = e.check()
	if err == nil {
		err = checkRanges(fs)
	}
	if err == nil && cmd.args == "" && len(positional) > 0 {
		err = usagef("unexpected argument %q", positional[0])
	}
	if err == nil {
		err = exec(e)
	}
	var uerr *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "outboxctl %s: %v\n", cmd.name, err)
		fmt.Fprintf(stderr, "usage: %s (outboxctl %s -h for help)\n", cmd.synopsis(), cmd.name)
		return exitUsage
	case pgerr.OwnMissingTable(err):
		fmt.Fprintf(stderr, "outboxctl %s: %s does not exist: set -schema and -table (or %s and %s) to the outbox table, "+
			"or create it with outboxctl migrate (%v)\n", cmd.name, e.table.WithDefaults(), schemaEnv, tableEnv, err)
		return exitFail
	default:
		fmt.Fprintf(stderr, "outboxctl %s: %v\n", cmd.name, err)
		return exitFail
	}
}

// synopsis is the command's usage line, without "usage: ".
func (c command) synopsis() string {
	return strings.Join(strings.Fields("outboxctl "+c.name+" "+c.args+" [flags]"), " ")
}

// parse parses args, in which flags may come before, between and after
// the positional arguments ("inspect ID -schema app" as well as "inspect
// -schema app ID"), and returns the positional arguments in order. Every
// argument after "--" is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// isTerminal reports whether w is a terminal (a character device), where
// status -watch redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// check validates the common flags.
func (e *env) check() error {
	if e.url == "" {
		return usagef("no database: set -url or DATABASE_URL")
	}
	if err := e.table.WithDefaults().Validate(); err != nil {
		return usagef("-schema/-table: %v", err)
	}
	if _, err := pgx.ParseConfig(e.url); err != nil {
		// pgx's message may quote the URL; say only what went wrong.
		return usagef("-url: cannot be parsed as a PostgreSQL URL or DSN")
	}
	return nil
}

// connect opens the connection, once; commands call it after checking
// their own flags, so that bad usage never waits for the network.
func (e *env) connect() (*pgx.Conn, error) {
	if e.conn != nil {
		return e.conn, nil
	}
	cfg, err := pgx.ParseConfig(e.url)
	if err != nil { // check has parsed it already
		return nil, usagef("-url: cannot be parsed as a PostgreSQL URL or DSN")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	e.conn, err = pgx.ConnectConfig(e.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d as %s: %w", cfg.Host, cfg.Port, cfg.User, redactErr(err, []string{cfg.Password}))
	}
	return e.conn, nil
}

// close closes the connection if one was opened.
func (e *env) close() {
	if e.conn != nil {
		_ = e.conn.Close(context.WithoutCancel(e.ctx))
	}
}
