package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/integration/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// The secrets canary (issue 13, point 5): fresh random secrets, planted
// in a database role's SCRAM password, a broker password, an event's
// payload and a header value, must appear 0 times in everything pgoutbox
// says on every path the test can reach: logs at every level, errors
// (Error and %+v), recovered panics, stats, hooks, the rows' recorded
// errors and outboxctl's output. Each path must also have said
// something, so that the test cannot pass by capturing nothing.

// canarySecrets are the planted secrets, each "canary-" and 32 random hex
// digits, fresh per run.
type canarySecrets struct {
	db      string // the password of the role app_canary
	wrong   string // given as a wrong password (app_canary's, the brokers')
	broker  string // the NATS user's and the Kafka SASL user's password
	payload string // an event payload, whole
	header  string // an event header value
}

func newCanarySecret(t *testing.T) string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "canary-" + hex.EncodeToString(b)
}

// canary collects what the library says and checks it for the secrets.
type canary struct {
	t       *testing.T
	s       canarySecrets
	mu      sync.Mutex
	log     bytes.Buffer // slog output not yet checked
	cmu     sync.Mutex
	checked []string // the paths checked, in order
}

func newCanary(t *testing.T) *canary {
	return &canary{t: t, s: canarySecrets{
		db: newCanarySecret(t), wrong: newCanarySecret(t), broker: newCanarySecret(t),
		payload: newCanarySecret(t), header: newCanarySecret(t),
	}}
}

// all lists every secret; credentials only the database's and brokers'.
func (c *canary) all() map[string]string {
	return map[string]string{"db password": c.s.db, "wrong password": c.s.wrong,
		"broker password": c.s.broker, "payload": c.s.payload, "header value": c.s.header}
}

func (c *canary) credentials() map[string]string {
	return map[string]string{"db password": c.s.db, "wrong password": c.s.wrong, "broker password": c.s.broker}
}

// secretForms are the ways a secret could show up: its random part (as
// is, quoted, escaped or cut after its prefix), hex (bytea's text form),
// base64 (JSON's form of []byte) and fmt's form of a []byte.
func secretForms(secret string) map[string]string {
	return map[string]string{
		"random part": strings.TrimPrefix(secret, "canary-"),
		"hex":         hex.EncodeToString([]byte(secret)),
		"base64":      base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64url":   base64.URLEncoding.EncodeToString([]byte(secret)),
		"[]byte":      strings.Trim(fmt.Sprintf("%d", []byte(secret)), "[]"),
	}
}

// checkAgainst fails the test when text holds any form of the secrets,
// and when text is empty (the path said nothing: it was not exercised).
func (c *canary) checkAgainst(path, text string, secrets map[string]string) {
	c.t.Helper()
	if strings.TrimSpace(text) == "" {
		c.t.Errorf("canary: %s produced nothing to check: the path was not exercised", path)
		return
	}
	c.cmu.Lock()
	c.checked = append(c.checked, path)
	c.cmu.Unlock()
	for name, secret := range secrets {
		for form, s := range secretForms(secret) {
			if n := strings.Count(text, s); n > 0 {
				c.t.Errorf("canary: the %s leaked (%s form, %d times) through %s:\n%s",
					name, form, n, path, c.mask(text))
			}
		}
	}
}

// mask replaces every secret in text, so that a failure's message does
// not print them itself.
func (c *canary) mask(text string) string {
	for name, secret := range c.all() {
		for form, s := range secretForms(secret) {
			text = strings.ReplaceAll(text, s, "<"+name+", "+form+">")
		}
	}
	return text
}

// text checks what a path printed or returned.
func (c *canary) text(path, text string) {
	c.t.Helper()
	c.checkAgainst(path, text, c.all())
}

// err checks a returned error, which must be non-nil, as Error and %+v.
func (c *canary) err(path string, err error) {
	c.t.Helper()
	if err == nil {
		c.t.Errorf("canary: %s returned no error: the error path was not exercised", path)
		return
	}
	c.text(path+" (Error)", err.Error())
	c.text(path+" (%+v)", fmt.Sprintf("%+v", err))
}

// value checks a value printed with %+v and as JSON.
func (c *canary) value(path string, v any) {
	c.t.Helper()
	c.text(path+" (%+v)", fmt.Sprintf("%+v", v))
	b, err := json.Marshal(v)
	require.NoError(c.t, err)
	c.text(path+" (JSON)", string(b))
}

// logger returns a Debug-level logger writing text and JSON lines to the
// canary's log buffer.
func (c *canary) logger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, AddSource: true}
	w := canaryWriter{c}
	return slog.New(slog.NewMultiHandler(slog.NewTextHandler(w, opts), slog.NewJSONHandler(w, opts)))
}

type canaryWriter struct{ c *canary }

func (w canaryWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.log.Write(p)
}

// logs checks, and empties, what was logged since the last call; want
// is a message that must be among it, or "" for logs that may be empty.
func (c *canary) logs(path, want string) {
	c.t.Helper()
	c.mu.Lock()
	text := c.log.String()
	c.log.Reset()
	c.mu.Unlock()
	if want == "" && text == "" {
		return
	}
	if !strings.Contains(text, want) {
		c.t.Errorf("canary: the logs of %s lack %q: the path was not exercised\n%s", path, want, c.mask(text))
	}
	c.text(path+" (logs)", text)
}

// onError returns an OnError hook that checks every error it receives.
func (c *canary) onError(path string) func(error) {
	return func(err error) { c.err(path+" OnError", err) }
}

// canaryEventError is a handler's error that carries the event it failed
// on, payload and headers included, as real handlers' errors do; its
// text names only the event's id.
type canaryEventError struct{ event outbox.Event }

func (e *canaryEventError) Error() string {
	return "canary: cannot handle event " + e.event.ID.String()
}

// event returns an event of type typ carrying the payload and header
// secrets.
func (c *canary) event(typ string) outbox.Event {
	return outbox.Event{Type: typ, ContentType: "text/plain", Payload: []byte(c.s.payload),
		Headers: map[string]string{"X-Canary": c.s.header}}
}

// pgURL is a postgres:// URL to 127.0.0.1:port with user and password.
func pgURL(user, password string, port int, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// pgDSN is the keyword/value form of pgURL.
func pgDSN(user, password string, port int, db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password='%s' dbname=%s sslmode=disable connect_timeout=5",
		port, user, password, db)
}

// canaryDB is the throwaway cluster: the role app_canary, whose SCRAM
// password is the db secret, owns the database canary; the role
// app_other has a password of its own. Only postgres connects without
// a password (the harness's superuser).
type canaryDB struct {
	port  int
	super *pgxpool.Pool // postgres, on the database canary
	app   *pgxpool.Pool // app_canary, with its password, from the URL form
	url   string        // app_canary's URL, password included
	dsn   string        // the same as a keyword/value DSN
}

func startCanaryDB(t *testing.T, ctx context.Context, c *canary) *canaryDB {
	cl := pgcluster.Start(t, "password_encryption = 'scram-sha-256'")
	conn, err := pgx.Connect(ctx, cl.URL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	for _, q := range []string{
		"CREATE ROLE app_canary LOGIN PASSWORD " + quoteLiteral(c.s.db),
		"CREATE ROLE app_other LOGIN PASSWORD " + quoteLiteral("other-"+newCanarySecret(t)),
		"CREATE DATABASE canary OWNER app_canary",
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, "%s", strings.Fields(q)[:3])
	}
	var verifier string
	require.NoError(t, conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'app_canary'").Scan(&verifier))
	require.True(t, strings.HasPrefix(verifier, "SCRAM-SHA-256$"), "app_canary's password is not stored as SCRAM")
	require.NoError(t, cl.SetHBA(
		"host all postgres 127.0.0.1/32 trust",
		"host all all 127.0.0.1/32 scram-sha-256"))

	db := &canaryDB{port: cl.Port, url: pgURL("app_canary", c.s.db, cl.Port, "canary"),
		dsn: pgDSN("app_canary", c.s.db, cl.Port, "canary")}
	_, err = pgx.Connect(ctx, pgURL("app_canary", "", cl.Port, "canary"))
	require.Error(t, err, "app_canary connected without its password: pg_hba.conf does not ask for it")
	db.super = canaryPool(t, ctx, strings.Replace(cl.URL, "/postgres?", "/canary?", 1))
	db.app = canaryPool(t, ctx, db.url)
	require.NoError(t, db.app.Ping(ctx), "app_canary with its SCRAM password")
	return db
}

func canaryPool(t *testing.T, ctx context.Context, connString string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, connString)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// quoteLiteral quotes s as an SQL string literal (the secrets are hex).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// terminate ends every backend of app_canary; it returns how many.
func (db *canaryDB) terminate(t *testing.T, ctx context.Context) int {
	var n int
	require.NoError(t, db.super.QueryRow(ctx,
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'app_canary'").Scan(&n))
	return n
}

// TestSecretsCanary plants the secrets and drives every error path it
// can reach; see docs/reliability.md, "Secrets canary".
func TestSecretsCanary(t *testing.T) {
	ctx := testctx.New(t)
	c := newCanary(t)
	db := startCanaryDB(t, ctx, c)
	t.Run("connect", func(t *testing.T) { c.t = t; canaryConnect(t, ctx, c, db) })
	t.Run("migrate", func(t *testing.T) { c.t = t; canaryMigrate(t, ctx, c, db) })
	t.Run("emit", func(t *testing.T) { c.t = t; canaryEmit(t, ctx, c, db) })
	t.Run("dispatch", func(t *testing.T) { c.t = t; canaryDispatch(t, ctx, c, db) })
	t.Run("listener", func(t *testing.T) { c.t = t; canaryListener(t, ctx, c, db) })
	t.Run("kafka", func(t *testing.T) { c.t = t; canaryKafka(t, ctx, c) })
	t.Run("inbox", func(t *testing.T) { c.t = t; canaryInbox(t, ctx, c, db) })
	t.Run("admin", func(t *testing.T) { c.t = t; canaryAdmin(t, ctx, c, db) })
	t.Run("outboxctl", func(t *testing.T) { c.t = t; canaryOutboxctl(t, ctx, c, db) })
	c.t = t
	if !t.Failed() {
		t.Logf("canary: %d outputs checked, the secrets found in none of them", len(c.checked))
	}
}

// badConnStrings are connection strings that cannot connect, each with a
// secret as its password, in the URL and the keyword/value form.
func (db *canaryDB) badConnStrings(c *canary, t *testing.T) map[string]string {
	closed, err := testdb.FreePort()
	require.NoError(t, err)
	return map[string]string{
		"wrong password (URL)":         pgURL("app_canary", c.s.wrong, db.port, "canary"),
		"wrong password (DSN)":         pgDSN("app_canary", c.s.wrong, db.port, "canary"),
		"the secret, wrong role (URL)": pgURL("app_other", c.s.db, db.port, "canary"),
		"the secret, wrong role (DSN)": pgDSN("app_other", c.s.db, db.port, "canary"),
		"refused port (URL)":           pgURL("app_canary", c.s.db, closed, "canary"),
		"refused port (DSN)":           pgDSN("app_canary", c.s.db, closed, "canary"),
		"unknown host (URL)":           strings.Replace(db.url, "127.0.0.1", "canary.invalid", 1),
		"unknown host (DSN)":           strings.Replace(db.dsn, "127.0.0.1", "canary.invalid", 1),
		"no such database (URL)":       pgURL("app_canary", c.s.db, db.port, "nosuchdb"),
	}
}

// canaryConnect: every bad connection string, through pgx and through
// each package of pgoutbox that takes a pool.
func canaryConnect(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	bad := db.badConnStrings(c, t)
	for name, cs := range bad {
		_, err := pgx.Connect(ctx, cs)
		c.err("pgx.Connect, "+name, err)
		pool := canaryPool(t, ctx, cs)
		c.err("migrations.Migrate, "+name, migrations.Migrate(ctx, pool, migrations.Config{}))
		c.err("migrations.Verify, "+name, migrations.Verify(ctx, pool, migrations.Config{}))
		c.err("inbox.Migrate, "+name, inbox.Migrate(ctx, pool, inbox.Config{}))
		ad, err := admin.New(pool, admin.Config{})
		require.NoError(t, err)
		_, err = ad.Counts(ctx)
		c.err("admin.Counts, "+name, err)
		_, err = ad.List(ctx, admin.ListParams{})
		c.err("admin.List, "+name, err)
	}
	for _, name := range []string{"wrong password (URL)", "the secret, wrong role (DSN)", "refused port (URL)"} {
		canaryDispatcherDown(t, ctx, c, "dispatcher, "+name, canaryPool(t, ctx, bad[name]))
	}
	broken := strings.Replace(db.url, strconv.Itoa(db.port), "notaport", 1)
	_, err := pgx.ParseConfig(broken)
	c.err("pgx.ParseConfig, a broken URL", err)
	_, err = pgxpool.ParseConfig(strings.Replace(db.dsn, "port=", "port=x", 1))
	c.err("pgxpool.ParseConfig, a broken DSN", err)
}

// canaryDispatcherDown runs a dispatcher whose pool cannot connect: Run
// must fail, or log and report why it cannot work.
func canaryDispatcherDown(t *testing.T, ctx context.Context, c *canary, path string, pool *pgxpool.Pool) {
	d, err := dispatcher.New(pool, dispatcher.Config{Logger: c.logger(), OnError: c.onError(path),
		PollInterval: 50 * time.Millisecond, WakeupProbeTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c.err(path+", Run", d.Run(runCtx))
	c.value(path+", Stats", d.Stats())
	c.logs(path, "") // Run returns the error; the logs may be empty
}

// canaryMigrate migrates as app_canary, then checks the error of a
// verification that fails.
func canaryMigrate(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	require.NoError(t, migrations.Migrate(ctx, db.app, migrations.Config{}))
	require.NoError(t, inbox.Migrate(ctx, db.app, inbox.Config{}))
	require.NoError(t, migrations.Verify(ctx, db.app, migrations.Config{}))
	missing := migrations.Config{Table: outbox.Table{Name: "never_migrated"}}
	c.err("migrations.Verify, a table never migrated", migrations.Verify(ctx, db.app, missing))
	_, err := db.super.Exec(ctx, "ALTER TABLE public.outbox_events RENAME COLUMN headers TO canary_headers")
	require.NoError(t, err)
	c.err("migrations.Verify, a drifted table", migrations.Verify(ctx, db.app, migrations.Config{}))
	_, err = db.super.Exec(ctx, "ALTER TABLE public.outbox_events RENAME COLUMN canary_headers TO headers")
	require.NoError(t, err)
}

// canaryEmit: Emit's rejections of bad input that carries the secrets,
// and Emit on a transaction whose connection was killed.
func canaryEmit(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	tooBig := c.event("canary.big")
	tooBig.Payload = bytes.Repeat([]byte(c.s.payload), 2<<20/len(c.s.payload))
	notJSON := c.event("canary.json")
	notJSON.ContentType = "application/json"
	bad := map[string]func(outbox.Event) outbox.Event{
		"header name":           func(e outbox.Event) outbox.Event { e.Headers = map[string]string{"X Canary": c.s.header}; return e },
		"header value with LF":  func(e outbox.Event) outbox.Event { e.Headers["X-Canary"] = "a\n" + c.s.header; return e },
		"header value with NUL": func(e outbox.Event) outbox.Event { e.Headers["X-Canary"] = c.s.header + "\x00"; return e },
		"header value spaced":   func(e outbox.Event) outbox.Event { e.Headers["X-Canary"] = " " + c.s.header; return e },
		"reserved header name":  func(e outbox.Event) outbox.Event { e.Headers["ce_canary"] = c.s.header; return e },
		"payload too big":       func(outbox.Event) outbox.Event { return tooBig },
		"payload not JSON":      func(outbox.Event) outbox.Event { return notJSON },
		"no type":               func(e outbox.Event) outbox.Event { e.Type = ""; return e },
	}
	tx, err := db.app.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for name, mutate := range bad {
		_, err := canaryEmitter(t).Emit(ctx, tx, c.event("canary.ok"), mutate(c.event("canary.ok")))
		c.err("emitter.Emit, "+name, err)
	}
	var pid int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = db.super.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	_, err = canaryEmitter(t).Emit(ctx, tx, c.event("canary.ok"))
	c.err("emitter.Emit, its connection killed", err)
	_, err = canaryEmitter(t).Emit(ctx, tx, c.event("canary.ok"))
	c.err("emitter.Emit, a dead transaction", err)
}

// canaryNATS starts an in-process NATS server whose one user,
// app_canary, has the broker secret as its password, and returns its
// host:port.
func canaryNATS(t *testing.T, c *canary) string {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, Username: "app_canary", Password: c.s.broker,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second), "in-process nats-server did not start")
	return srv.Addr().String()
}

// canaryPublisher connects to NATS with the broker secret in the URL and
// returns a publisher and its connection, with a stream for the subjects
// "canary.pub.>" only.
func canaryPublisher(t *testing.T, ctx context.Context, c *canary, addr string) (*natspub.Publisher, *nats.Conn) {
	for name, u := range map[string]string{
		"wrong password": "nats://app_canary:" + c.s.wrong + "@" + addr,
		"wrong user":     "nats://someone:" + c.s.broker + "@" + addr,
	} {
		_, err := nats.Connect(u, nats.Timeout(2*time.Second), nats.NoReconnect())
		c.err("nats.Connect, "+name, err)
	}
	nc, err := nats.Connect("nats://app_canary:"+c.s.broker+"@"+addr, nats.NoReconnect())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "CANARY", Subjects: []string{"canary.pub.>"}})
	require.NoError(t, err)
	pub, err := natspub.New(js, natspub.Config{AckTimeout: time.Second})
	require.NoError(t, err)
	return pub, nc
}

// canaryHandlers are the dispatcher's handlers, by event type; slow ones
// signal started and run until their context ends or release closes.
func canaryHandlers(started chan<- struct{}, release <-chan struct{}) map[string]outbox.Handler {
	return map[string]outbox.Handler{
		"canary.ok":        func(context.Context, outbox.Event) error { return nil },
		"canary.publish":   func(context.Context, outbox.Event) error { return nil },
		"canary.nostream":  func(context.Context, outbox.Event) error { return nil },
		"canary.err":       func(_ context.Context, e outbox.Event) error { return &canaryEventError{event: e} },
		"canary.permanent": func(_ context.Context, e outbox.Event) error { return outbox.Permanent(&canaryEventError{event: e}) },
		"canary.panic":     func(_ context.Context, e outbox.Event) error { panic(e) },
		"canary.panicerr":  func(_ context.Context, e outbox.Event) error { panic(&canaryEventError{event: e}) },
		"canary.slow": func(ctx context.Context, _ outbox.Event) error {
			started <- struct{}{}
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil
		},
	}
}

// canaryEmitter writes to public.outbox_events, the canary's table, named
// as every application names its own.
func canaryEmitter(t *testing.T) *emitter.Emitter {
	t.Helper()
	em, err := emitter.New(emitter.Config{Table: outbox.Table{Schema: outbox.DefaultSchema, Name: outbox.DefaultTable}})
	require.NoError(t, err)
	return em
}

// canaryEmitAll emits one event of each type in one transaction.
func canaryEmitAll(t *testing.T, ctx context.Context, c *canary, pool *pgxpool.Pool, types ...string) {
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var events []outbox.Event
	for _, typ := range types {
		events = append(events, c.event(typ))
	}
	_, err = canaryEmitter(t).Emit(ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// canaryDispatch runs a dispatcher as app_canary over events of every
// handler's type, publishing some to NATS (one to a subject without a
// stream, then all through a closed connection), kills its connections
// while handlers run, and checks its logs, hooks, errors and stats.
func canaryDispatch(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	pub, nc := canaryPublisher(t, ctx, c, canaryNATS(t, c))
	started, release := make(chan struct{}, 4), make(chan struct{})
	cfg := dispatcher.Config{
		Logger: c.logger(), OnError: c.onError("dispatch"), Publisher: pub,
		PollInterval: 50 * time.Millisecond, LeaseDuration: 2 * time.Second, MaxAttempts: 1,
		RouteFunc: func(e outbox.Event) string {
			return map[string]string{"canary.publish": "canary.pub.ok", "canary.nostream": "canary.nostream"}[e.Type]
		},
		OnOutcome: func(_ context.Context, o dispatcher.Outcome) {
			if o.Err != nil {
				c.err("dispatch OnOutcome "+o.Event.Type, o.Err)
			}
		},
	}
	d, err := dispatcher.New(db.app, cfg)
	require.NoError(t, err)
	for typ, h := range canaryHandlers(started, release) {
		require.NoError(t, d.Handle(typ, h))
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	canaryEmitAll(t, ctx, c, db.app, "canary.ok", "canary.publish", "canary.nostream", "canary.err",
		"canary.permanent", "canary.panic", "canary.panicerr", "canary.slow", "canary.slow", "canary.unhandled")
	<-started
	<-started
	// The wake-up probe runs beside dispatching: the listener must be up
	// before the kill, for its reconnect to be seen.
	testctx.Await(t, "the listener to come up", func() bool { return d.Health().Listener == dispatcher.ListenerActive })
	require.Positive(t, db.terminate(t, ctx), "no app_canary backend to terminate")
	close(release)
	// canary.unhandled has no handler and an empty route: the dispatcher
	// releases it for a replica that can route it (Stats.Unroutable, a
	// WARN), never dead-letters it, so it stays PENDING.
	canaryAwaitDone(t, ctx, db, "canary.unhandled")
	testctx.Await(t, "the unroutable event to be released", func() bool { return d.Stats().Unroutable > 0 })
	nc.Close()
	// A closed connection is an outage: the event goes back to PENDING,
	// no attempt spent, and the circuit opens with a WARN that names
	// the cause.
	canaryEmitAll(t, ctx, c, db.app, "canary.publish")
	testctx.Await(t, "the closed connection to open the circuit", func() bool { return d.Stats().OutageReturned > 0 })
	testctx.Await(t, "the listener to reconnect after its backend was killed", func() bool { return d.Stats().ListenerConnects >= 2 })

	st := d.Stats()
	h := d.Health()
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, st.ListenerConnects, uint64(2), "the listener was not reconnected after its backend was killed")
	require.Positive(t, st.Failed)
	require.Positive(t, st.CircuitOpens)
	// The event the outage returned spent no attempt; it goes, so that
	// the next paths start from a drained table.
	var spent int
	require.NoError(t, db.super.QueryRow(ctx, `WITH gone AS (DELETE FROM public.outbox_events
		WHERE status = 'PENDING' AND event_type = 'canary.publish' RETURNING attempts) SELECT coalesce(sum(attempts), -1) FROM gone`).Scan(&spent))
	require.Zero(t, spent, "the event held back by the outage spent an attempt")
	var unrouted int
	require.NoError(t, db.super.QueryRow(ctx, `WITH gone AS (DELETE FROM public.outbox_events
		WHERE status = 'PENDING' AND event_type = 'canary.unhandled' RETURNING attempts) SELECT coalesce(sum(attempts), -1) FROM gone`).Scan(&unrouted))
	require.Zero(t, unrouted, "the unroutable event spent an attempt")
	c.value("dispatcher.Stats", st)
	c.value("dispatcher.Health", h)
	c.logs("dispatch", "circuit open")
}

// canaryAwaitDone waits until no event is PENDING or PROCESSING, but for
// events of the types in except.
func canaryAwaitDone(t *testing.T, ctx context.Context, db *canaryDB, except ...string) {
	except = append([]string{}, except...) // never nil: "<> ALL (NULL)" is NULL
	testctx.Await(t, "every event to leave PENDING and PROCESSING", func() bool {
		var n int
		err := db.super.QueryRow(ctx, `SELECT count(*) FROM public.outbox_events
			WHERE status IN ('PENDING', 'PROCESSING') AND event_type <> ALL ($1::text[])`, except).Scan(&n)
		return err == nil && n == 0
	})
}

// canaryListener runs dispatchers whose listener connection cannot
// connect (a wrong password; the secret for the wrong role): they must
// say so and go on polling.
func canaryListener(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	for name, cs := range map[string]string{
		"wrong password":               pgURL("app_canary", c.s.wrong, db.port, "canary"),
		"the secret, wrong role (DSN)": pgDSN("app_other", c.s.db, db.port, "canary"),
	} {
		lcfg, err := pgx.ParseConfig(cs)
		require.NoError(t, err)
		path := "listener, " + name
		d, err := dispatcher.New(db.app, dispatcher.Config{Logger: c.logger(), OnError: c.onError(path),
			ListenerConnConfig: lcfg, PollInterval: 50 * time.Millisecond, WakeupProbeTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, d.Handle("canary.ok", func(context.Context, outbox.Event) error { return nil }))
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		canaryEmitAll(t, ctx, c, db.app, "canary.ok")
		canaryAwaitDone(t, ctx, db)
		// The probe runs beside dispatching: wait for its verdict.
		testctx.Await(t, "the listener's failure to be noticed", func() bool { return d.Health().Listener == dispatcher.ListenerUnavailable })
		st := d.Stats()
		require.NoError(t, d.Stop(ctx))
		require.NoError(t, <-done)
		require.False(t, st.WakeupsActive, "the listener connected with a wrong password")
		c.value(path+", Stats", st)
		c.logs(path, "wake-ups are not working")
	}
}

// canaryKafka publishes through kafkapub to a kfake cluster that wants
// SASL PLAIN with the broker secret: with it, and with a wrong password.
func canaryKafka(t *testing.T, ctx context.Context, c *canary) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "app_canary", c.s.broker), kfake.SeedTopics(1, "canary"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	msgs := []outbox.Message{{Destination: "canary", Event: c.event("canary.publish")}}
	msgs[0].Event.ID = uuid.New()
	for name, pass := range map[string]string{"right password": c.s.broker, "wrong password": c.s.wrong} {
		client, err := kgo.NewClient(kgo.SeedBrokers(cl.ListenAddrs()...),
			kgo.SASL(plain.Auth{User: "app_canary", Pass: pass}.AsMechanism()),
			kgo.RecordDeliveryTimeout(3*time.Second), kgo.RetryTimeout(3*time.Second))
		require.NoError(t, err)
		pub, err := kafkapub.New(client, kafkapub.Config{})
		require.NoError(t, err)
		errs := pub.Publish(ctx, msgs)
		client.Close()
		require.Len(t, errs, 1)
		if name == "right password" {
			require.NoError(t, errs[0])
			continue
		}
		c.err("kafkapub.Publish, "+name, errs[0])
	}
}

// canaryInbox: the inbox's errors for work that fails with an error
// carrying the event, a reused id with other content, bad input, a dead
// transaction and a pool that cannot connect.
func canaryInbox(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	ib, err := inbox.New(inbox.Config{})
	require.NoError(t, err)
	e := c.event("canary.ok")
	e.ID = uuid.New()
	failing := func(context.Context, pgx.Tx) error { return &canaryEventError{event: e} }
	ok := func(context.Context, pgx.Tx) error { return nil }

	tx, err := db.app.Begin(ctx)
	require.NoError(t, err)
	_, err = ib.Process(ctx, tx, "canary", e, failing)
	c.err("inbox.Process, failing work", err)
	_, err = ib.Process(ctx, tx, "canary", e, ok)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	other := e
	other.Payload = []byte(c.s.header)
	tx, err = db.app.Begin(ctx)
	require.NoError(t, err)
	_, err = ib.Process(ctx, tx, "canary", other, ok)
	c.err("inbox.Process, a reused id", err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = ib.Process(ctx, tx, "canary", e, ok)
	c.err("inbox.Process, a finished transaction", err)

	zero := e
	zero.ID = uuid.Nil
	tx, err = db.app.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = ib.Record(ctx, tx, "canary", zero)
	c.err("inbox.Record, a zero id", err)
	_, err = ib.Record(ctx, tx, "", e)
	c.err("inbox.Record, no consumer", err)
	_, err = ib.Purge(ctx, canaryPool(t, ctx, pgURL("app_canary", c.s.wrong, db.port, "canary")), time.Hour, 100)
	c.err("inbox.Purge, a wrong password", err)
}

// canaryAdmin reads the outbox the dispatcher left (events FAILED by
// handler errors, panics and publish errors carrying the secrets) through
// the admin package: Inspect shows payload and headers by design, so its
// result is checked for the credentials only.
func canaryAdmin(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	ad, err := admin.New(db.app, admin.Config{})
	require.NoError(t, err)
	counts, err := ad.Counts(ctx)
	require.NoError(t, err)
	require.Positive(t, counts.Failed)
	c.value("admin.Counts", counts)
	page, err := ad.List(ctx, admin.ListParams{Limit: admin.MaxListLimit})
	require.NoError(t, err)
	c.value("admin.List", page)
	for _, r := range page.Events {
		if r.Status != outbox.StatusFailed {
			continue
		}
		detail, err := ad.Inspect(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, c.s.payload, string(detail.Payload), "Inspect shows the payload by design")
		c.checkAgainst("admin.Inspect (the credentials only)", fmt.Sprintf("%+v", detail), c.credentials())
		c.text("admin.Inspect's attempt log", fmt.Sprintf("%+v", detail.AttemptLog))
	}
	_, err = ad.Inspect(ctx, uuid.New())
	c.err("admin.Inspect, no such event", err)
	_, err = ad.List(ctx, admin.ListParams{Type: "canary\x00"})
	c.err("admin.List, a type with NUL", err)
	_, err = ad.Replay(ctx, admin.ReplayParams{Type: "canary\x00"})
	c.err("admin.Replay, a type with NUL", err)
	res, err := ad.Replay(ctx, admin.ReplayParams{Type: "canary.unhandled"})
	require.NoError(t, err)
	c.value("admin.Replay", res)
}

// canaryOutboxctl runs the outboxctl binary with the secret-bearing URL
// in -url, in DATABASE_URL and as a keyword/value DSN: its read commands,
// verify and migrate, and its failures. inspect prints the payload and
// headers by design: its stdout is checked for the credentials only.
func canaryOutboxctl(t *testing.T, ctx context.Context, c *canary, db *canaryDB) {
	bin := filepath.Join(t.TempDir(), "outboxctl")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pgoutbox/pgoutbox/cmd/outboxctl").CombinedOutput()
	require.NoError(t, err, "go build outboxctl: %s", out)
	var failed string
	require.NoError(t, db.super.QueryRow(ctx, "SELECT id::text FROM "+testdb.AllRows(outbox.Table{Schema: "public"})+" AS e WHERE status = 'FAILED' LIMIT 1").Scan(&failed))

	run := func(path string, env string, wantOK bool, args ...string) (stdout, stderr string) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		require.Equal(t, wantOK, err == nil, "outboxctl %s: %v\n%s", path, err, c.mask(e.String()))
		return o.String(), e.String()
	}
	forms := []struct { // the connection string forms, taken in turn
		suffix, env string
		flags       []string
	}{
		{" -url URL", "", []string{"-url", db.url}},
		{" -url=DSN", "", []string{"-url=" + db.dsn}},
		{" with DATABASE_URL", db.url, nil},
	}
	for i, args := range [][]string{{"counts"}, {"counts", "-json"}, {"list"}, {"list", "-json"},
		{"list", "-status", "failed"}, {"verify"}, {"migrate"}, {"replay", "-code", "panic"},
		{"purge", "-status", "failed", "-older-than", "1h"}} {
		f := forms[i%len(forms)]
		path := "outboxctl " + strings.Join(args, " ") + f.suffix
		stdout, _ := run(path, f.env, true, append(args, f.flags...)...)
		c.text(path, stdout)
	}
	for _, args := range [][]string{{"inspect", "-json", failed}, {"inspect", failed}} {
		stdout, _ := run("outboxctl inspect", db.url, true, args...)
		require.Contains(t, strings.ToLower(stdout), "payload", "inspect prints the payload by design")
		c.checkAgainst("outboxctl "+strings.Join(args[:len(args)-1], " ")+" (the credentials only)", stdout, c.credentials())
	}
	cmds := [][]string{{"counts"}, {"migrate"}, {"inspect", failed}, {"list"}}
	i := 0
	for name, cs := range db.badConnStrings(c, t) {
		args := cmds[i%len(cmds)]
		i++
		path := "outboxctl " + args[0] + ", " + name
		if i%2 == 0 { // -url and DATABASE_URL in turn
			_, stderr := run(path+" -url", "", false, append(args, "-url", cs)...)
			c.text(path+" -url", stderr)
			continue
		}
		_, stderr := run(path+" with DATABASE_URL", cs, false, args...)
		c.text(path+" with DATABASE_URL", stderr)
	}
	broken := strings.Replace(db.url, strconv.Itoa(db.port), "notaport", 1)
	_, stderr := run("outboxctl counts, a broken URL", "", false, "counts", "-url", broken)
	c.text("outboxctl counts, a broken URL", stderr)
	_, stderr = run("outboxctl counts, a bad flag", "", false, "counts", "-url", db.url, "-limit", "x")
	c.text("outboxctl counts, a bad flag", stderr)
}
