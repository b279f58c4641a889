package dispatcher_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// A /healthz endpoint for readiness and liveness probes: 200 while the
// dispatcher runs and its claims and outcome writes are not failing for
// longer than a minute, 503 with the reason otherwise. Start reports a
// start-up error (a missing table, schema drift) before the program goes
// on to serve.
func ExampleDispatcher_Health() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()

	d, err := dispatcher.New(pool, dispatcher.Config{Table: table})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err) // a real program logs it and exits non-zero
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := d.Health().Healthy(time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := httptest.NewServer(mux) // a real program: http.ListenAndServe(":8080", mux)
	defer srv.Close()

	probe := func() {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			panic(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	probe()
	if err := d.Stop(ctx); err != nil {
		panic(err)
	}
	probe()
	// Output:
	// 200 ok
	// 503 pgoutbox: dispatcher unhealthy: stopped
}
