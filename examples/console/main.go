// Command console shows the operator console mounted in a service: the
// service's own mux serves its API at / and the console under /outbox,
// next to a dispatcher in the same process, whose health and circuit the
// console's overview shows.
//
// It migrates an outbox into the schema pgoutbox_console_demo (emptied
// first), emits a few orders' events, and runs a dispatcher whose
// handlers deliver order.created, and fail invoice.mailed until it ends
// FAILED, so that the console has dead letters to show and replay.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/console
//
// then open http://127.0.0.1:8081/outbox/ (LISTEN changes the address)
// and log in as "operator" with the password in CONSOLE_PASSWORD (default
// "demo"). Actions (replay, skip, purge) are enabled; the audit log
// records that user. A real service puts its own authentication in
// Authorize, as for its other admin pages.
package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// table is the demo's outbox: pgoutbox_console_demo.outbox_events.
var table = outbox.Table{Schema: "pgoutbox_console_demo"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("LISTEN"), "127.0.0.1:8081"))
	if err != nil {
		log.Fatal(err)
	}
	password := cmp.Or(os.Getenv("CONSOLE_PASSWORD"), "demo")
	if err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), ln, password, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run sets the outbox up, starts the dispatcher, and serves the
// service's mux on ln until ctx ends.
func run(ctx context.Context, url string, ln net.Listener, password string, out io.Writer) error {
	if err := setUp(ctx, url); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := emitOrders(ctx, pool); err != nil {
		return err
	}
	d, err := startDispatcher(ctx, pool, out)
	if err != nil {
		return err
	}
	defer func() { _ = d.Stop(context.WithoutCancel(ctx)) }()
	mux, err := newMux(pool, d, password)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "service on http://%s/, console on http://%s/outbox/ (log in as operator)\n", ln.Addr(), ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newMux is the service's mux: its own API at /, the console under
// /outbox.
func newMux(pool *pgxpool.Pool, d *dispatcher.Dispatcher, password string) (*http.ServeMux, error) {
	a, err := admin.New(pool, admin.Config{Table: table, Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	const base = "/outbox"
	authorize := operator(password)
	h, err := console.New(console.Config{
		Admin:        a,
		AllowActions: true,
		Authorize:    authorize,
		BasePath:     base,
		Logger:       slog.Default(),
		Dispatchers:  []*dispatcher.Dispatcher{d},
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(base+"/", challenge(authorize, http.StripPrefix(base, h)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "the orders service; its outbox console is at /outbox/")
	})
	return mux, nil
}

// operator is the demo's Authorize: the basic-auth user "operator" with
// the password. A real service puts its own authentication here, as for
// its other admin pages.
func operator(password string) func(r *http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		user, pass, ok := r.BasicAuth()
		return user, ok && user == "operator" && subtle.ConstantTimeCompare([]byte(pass), []byte(password)) == 1
	}
}

// challenge answers 401 with a basic-auth challenge, so that a browser
// asks for the user and password, to requests that authorize refuses.
func challenge(authorize func(*http.Request) (string, bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(r); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="outbox console", charset="UTF-8"`)
			http.Error(w, "log in as operator", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// setUp creates or upgrades the outbox and empties it.
func setUp(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `TRUNCATE pgoutbox_console_demo.outbox_events, pgoutbox_console_demo.outbox_events_dead,
		pgoutbox_console_demo.outbox_events_sent`)
	return err
}

// emitOrders commits a few orders' events.
func emitOrders(ctx context.Context, pool *pgxpool.Pool) error {
	e, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 5 {
			var events []outbox.Event
			for _, typ := range []string{"order.created", "invoice.mailed"} {
				ev, err := outbox.NewJSON(typ, map[string]any{"order": i, "customer": fmt.Sprintf("customer-%d", i)})
				if err != nil {
					return err
				}
				ev.AggregateType, ev.AggregateID = "order", fmt.Sprintf("order-%d", i)
				events = append(events, ev)
			}
			if _, err := e.Emit(ctx, tx, events...); err != nil {
				return err
			}
		}
		return nil
	})
}

// startDispatcher runs a dispatcher that delivers order.created and
// fails invoice.mailed twice, after which it is FAILED; it prints each
// event that settled (SENT or FAILED) to out.
func startDispatcher(ctx context.Context, pool *pgxpool.Pool, out io.Writer) (*dispatcher.Dispatcher, error) {
	var mu sync.Mutex // OnOutcome may run on two goroutines at once
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:        table,
		PollInterval: 200 * time.Millisecond,
		MaxAttempts:  2,
		Backoff:      outbox.Backoff{Initial: 200 * time.Millisecond, NoJitter: true},
		Logger:       slog.New(slog.DiscardHandler),
		OnOutcome: func(_ context.Context, o dispatcher.Outcome) {
			if o.Status == outbox.StatusSent || o.Status == outbox.StatusFailed {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(out, "%s %s %s\n", o.Event.AggregateID, o.Event.Type, o.Status)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	handlers := map[string]outbox.Handler{
		"order.created":  func(context.Context, outbox.Event) error { return nil },
		"invoice.mailed": func(context.Context, outbox.Event) error { return errors.New("mailbox unavailable") },
	}
	for typ, h := range handlers {
		if err := d.Handle(typ, h); err != nil {
			return nil, err
		}
	}
	return d, d.Start(ctx)
}
