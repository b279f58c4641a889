package console_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The console mounted under /outbox in a service's own mux, with actions
// for the service's operators. sessionUser stands for the service's own
// authentication.
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), "postgres://app@db/app")
	if err != nil {
		log.Fatal(err)
	}
	a, err := admin.New(pool, admin.Config{Table: outbox.Table{Schema: "app"}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := console.New(console.Config{
		Admin:        a,
		BasePath:     "/outbox",
		AllowActions: true,
		Authorize: func(r *http.Request) (string, bool) {
			user, operator := sessionUser(r)
			return user, operator
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the service")) })
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// sessionUser is the service's own authentication: the user's name and
// whether they may operate the outbox.
func sessionUser(r *http.Request) (string, bool) {
	c, err := r.Cookie("session")
	return "ops", err == nil && c.Value != ""
}
