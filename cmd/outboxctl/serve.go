package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
)

// Serve bounds.
const (
	// minTokenLen is the shortest token -token-file may hold.
	minTokenLen = 16
	// serveConns is the most database connections the console uses.
	serveConns = 4
	// shutdownGrace bounds the wait for requests in flight at the end.
	shutdownGrace = 5 * time.Second
)

func serveFlags(fs *flag.FlagSet) func(*env) error {
	listen := fs.String("listen", "127.0.0.1:8080", "`address` to serve the console on")
	allow := fs.Bool("allow-actions", false, "enable replay, skip and purge (requires -token-file); without it the console is read-only")
	user := fs.String("user", "", "`name` the audit log records as the actor of actions (default $USER@hostname); "+
		"a basic-auth user name, when the browser sends one, is recorded instead")
	tokenFile := fs.String("token-file", "", "`file` holding the access token (at least 16 characters; surrounding white space is ignored): "+
		"every request must carry it, as a Bearer token or as the basic-auth password")
	return func(e *env) error {
		if *allow && *tokenFile == "" {
			return usagef("-allow-actions requires -token-file: actions are only served to requests carrying its token")
		}
		auth, err := readToken(*tokenFile)
		if err != nil {
			return err
		}
		auth.user = *user
		if auth.user == "" {
			auth.user = actor().Name
		}
		pool, err := e.pool()
		if err != nil {
			return err
		}
		defer pool.Close()
		logger := slog.New(slog.NewTextHandler(e.out, nil))
		a, err := admin.New(pool, admin.Config{Table: e.table, Logger: logger})
		if err != nil {
			return err
		}
		cfg := console.Config{Admin: a, AllowActions: *allow, Logger: logger}
		if auth.digest != nil {
			cfg.Authorize = auth.check
		}
		h, err := console.New(cfg)
		if err != nil {
			return err
		}
		if auth.digest == nil {
			return e.serve(*listen, addressedByIP(h), *allow, false)
		}
		return e.serve(*listen, auth.require(h), *allow, true)
	}
}

// pool opens a small pool for the console's concurrent requests.
func (e *env) pool() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil { // check has parsed it already
		return nil, usagef("-url: cannot be parsed as a PostgreSQL URL or DSN")
	}
	cfg.MaxConns = serveConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err == nil {
		err = pool.Ping(e.ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		c := cfg.ConnConfig
		return nil, fmt.Errorf("connect to %s:%d as %s: %w", c.Host, c.Port, c.User, redactErr(err, []string{c.Password}))
	}
	return pool, nil
}

// serve listens on addr and serves h until the command's context ends
// (an interrupt), then lets requests in flight finish.
func (e *env) serve(addr string, h http.Handler, actions, token bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	mode := "read-only"
	if actions {
		mode = "actions enabled"
	}
	e.printf("console for %s on http://%s/ (%s)\n", e.table.WithDefaults(), ln.Addr(), mode)
	if !token && !isLoopback(ln.Addr()) {
		e.printf("warning: serving without -token-file on a non-loopback address: anyone who reaches it reads the outbox\n")
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-e.ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// tokenAuth checks the access token of outboxctl serve: a request
// carries it as "Authorization: Bearer <token>" or as the password of
// basic auth (which a browser asks for once and then sends with every
// request). Its digest is compared in constant time. A nil digest (no
// -token-file) lets every request through.
type tokenAuth struct {
	digest []byte // sha256 of the token
	user   string // the actor when the request names none
}

// readToken reads the token file; "" means no token.
func readToken(path string) (tokenAuth, error) {
	if path == "" {
		return tokenAuth{}, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return tokenAuth{}, usagef("-token-file: %v", err)
	}
	tok := strings.TrimSpace(string(raw))
	if len(tok) < minTokenLen || strings.ContainsAny(tok, "\r\n") {
		return tokenAuth{}, usagef("-token-file must hold one token of at least %d characters on one line", minTokenLen)
	}
	sum := sha256.Sum256([]byte(tok))
	return tokenAuth{digest: sum[:]}, nil
}

// check returns the request's actor and whether it carries the token:
// the console's Authorize.
func (t tokenAuth) check(r *http.Request) (string, bool) {
	given, name := "", ""
	if user, pass, ok := r.BasicAuth(); ok {
		given, name = pass, user
	} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		given = strings.TrimSpace(b)
	}
	sum := sha256.Sum256([]byte(given))
	if given == "" || subtle.ConstantTimeCompare(sum[:], t.digest) != 1 {
		return "", false
	}
	if name == "" {
		name = t.user
	}
	return name, true
}

// require asks for the token before h: a request without it gets 401
// with a basic-auth challenge, so that a browser prompts for it.
func (t tokenAuth) require(h http.Handler) http.Handler {
	if t.digest == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := t.check(r); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="outboxctl console", charset="UTF-8"`)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "the console needs its access token (-token-file): as the basic-auth password or a Bearer token",
				http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// addressedByIP refuses, without a token, requests whose Host is a name
// other than localhost: a web page elsewhere can point a name of its own
// at this address (DNS rebinding) and then read the console as its own
// origin; it cannot make the browser send an IP address as the Host.
func addressedByIP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if name, _, err := net.SplitHostPort(host); err == nil {
			host = name
		}
		host = strings.Trim(host, "[]")
		if host != "localhost" && net.ParseIP(host) == nil {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "without -token-file the console answers only requests addressed to an IP address or localhost "+
				"(a guard against DNS rebinding)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
