// Command observability shows pgoutbox's metrics in Prometheus: it
// installs an OpenTelemetry MeterProvider that exports to Prometheus (the
// application's choice: pgoutbox itself uses only the OpenTelemetry API),
// emits a few events, lets a dispatcher deliver them (three succeed, one
// fails for good), then scrapes its own /metrics endpoint and prints the
// pgoutbox series.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/observability
//
// It empties its own outbox first, so it can be run again and again. See
// docs/observability.md for every metric and what to alert on.
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// table is the example's outbox.
var table = outbox.Table{Schema: "pgoutbox_observability"}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, cmp.Or(os.Getenv("DATABASE_URL"), defaultURL), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	metricsURL, shutdown, err := serveMetrics()
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.WithoutCancel(ctx)) }()
	pool, err := setUp(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := emit(ctx, pool); err != nil {
		return err
	}
	return dispatch(ctx, pool, func() error {
		fmt.Fprintf(out, "Scraped %s:\n", metricsURL)
		return scrapeSampled(ctx, metricsURL, out)
	})
}

// serveMetrics installs the global MeterProvider, exporting to a
// Prometheus registry served on a local port, and returns the scrape URL.
// The emitter and the dispatcher use the global provider unless their
// Config names another.
func serveMetrics() (url string, shutdown func(context.Context) error, err error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return "", nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	otel.SetMeterProvider(provider)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/metrics", func(ctx context.Context) error {
		return errors.Join(srv.Shutdown(ctx), provider.Shutdown(ctx))
	}, nil
}

// setUp migrates the outbox and empties it.
func setUp(ctx context.Context, url string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: table}); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `TRUNCATE pgoutbox_observability.outbox_events, pgoutbox_observability.outbox_events_dead, pgoutbox_observability.outbox_events_sent`); err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, url)
}

// emit commits three order.created events and one order.cancelled.
func emit(ctx context.Context, pool *pgxpool.Pool) error {
	e, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := e.Emit(ctx, tx,
			outbox.Event{Type: "order.created", Payload: []byte(`{"id":1}`)},
			outbox.Event{Type: "order.created", Payload: []byte(`{"id":2}`)},
			outbox.Event{Type: "order.created", Payload: []byte(`{"id":3}`)},
			outbox.Event{Type: "order.cancelled", Payload: []byte(`{"id":2}`)})
		return err
	})
}

// dispatch delivers the events: order.created succeeds, order.cancelled
// fails for good (FAILED with handler_error). Once all four have settled,
// it calls settledThen while the dispatcher still runs (the backlog
// gauges are observed while it runs), then stops the dispatcher.
func dispatch(ctx context.Context, pool *pgxpool.Pool, settledThen func() error) error {
	settled := make(chan struct{}, 4)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:  table,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnOutcome: func(_ context.Context, o dispatcher.Outcome) {
			settled <- struct{}{}
		},
	})
	if err != nil {
		return err
	}
	if err := errors.Join(
		d.Handle("order.created", func(context.Context, outbox.Event) error { return nil }),
		d.Handle("order.cancelled", func(context.Context, outbox.Event) error {
			return outbox.Permanent(errors.New("the order was already shipped"))
		}),
	); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	for range 4 {
		select {
		case <-settled:
		case err := <-errc:
			return fmt.Errorf("the dispatcher stopped early: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	thenErr := settledThen()
	if err := d.Stop(ctx); err != nil {
		return errors.Join(thenErr, err)
	}
	return errors.Join(thenErr, <-errc)
}

// scrapeSampled scrapes until the backlog gauges show a sample (a scrape
// reports the last sample and asks the dispatcher for a new one when it
// is stale: the first after Run starts has none yet), and prints that
// scrape.
func scrapeSampled(ctx context.Context, url string, out io.Writer) error {
	for {
		var b strings.Builder
		if err := scrape(ctx, url, &b); err != nil {
			return err
		}
		if strings.Contains(b.String(), "pgoutbox_backlog_due{") {
			_, err := io.WriteString(out, b.String())
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrape prints the pgoutbox series of the endpoint.
func scrape(ctx context.Context, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if line := lines.Text(); strings.HasPrefix(line, "pgoutbox_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return lines.Err()
}
