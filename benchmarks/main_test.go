package main

import (
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// TestCases runs every case tiny (N=200) so the harness cannot rot: each
// must verify all its events. The cases mostly wait on the database, so
// they run casesAtOnce at a time rather than -parallel's GOMAXPROCS (two
// here): at two at a time, beside the root module's tests on a loaded
// machine, the package took 428s in CI, 7 times its time alone.
func TestCases(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	const casesAtOnce = 3
	slots := make(chan struct{}, casesAtOnce)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, args := range smokeRuns() {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			runSmokeCase(t, args)
		})
	}
}

// runSmokeCase runs one case of TestCases as a subtest. t.Run may be
// called from several goroutines at once; TestCases waits for them all.
func runSmokeCase(t *testing.T, args []string) {
	t.Run(strings.Join(args, " "), func(t *testing.T) {
		if slices.Contains(args, "dispatch-nats") || slices.Contains(args, "nats") {
			requireNATS(t)
		}
		if slices.Contains(args, "dispatch-rabbitmq") {
			requireRabbitMQ(t)
		}
		o, err := parseFlags(args)
		require.NoError(t, err)
		ctx := testctx.New(t)
		res, err := runCase(ctx, o)
		require.NoError(t, err)
		require.True(t, res.Verified, "%+v", res)
		require.Positive(t, res.EventsPerSec)
	})
}

// A run that does not end within its budget is counted failed, so that
// the sitting goes on. Not parallel: it adds a case and shortens the budget
// before the parallel tests run.
func TestRunOneBudget(t *testing.T) {
	cases["stall"] = func(ctx context.Context, _ Options) (Result, error) {
		<-ctx.Done()
		return Result{}, ctx.Err()
	}
	defer delete(cases, "stall")
	saved := runShortBudget
	runShortBudget = 50 * time.Millisecond
	defer func() { runShortBudget = saved }()
	r := runOne(testctx.New(t), Options{Short: true, URL: defaultURL()}, spec{label: "stall", args: args("stall", "")}, 1)
	require.ErrorContains(t, r.err, "within the run's budget of 50ms")
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
}

func TestParseFlagsRejects(t *testing.T) {
	t.Parallel()
	_, err := parseFlags(nil)
	require.ErrorContains(t, err, "-case is required")
	_, err = runCase(context.Background(), Options{Case: "nope"})
	require.ErrorContains(t, err, "unknown case")
}

func TestSetLatency(t *testing.T) {
	t.Parallel()
	samples := make([]int64, 100)
	for i := range samples {
		samples[i] = int64(100-i) * int64(time.Millisecond)
	}
	var r Result
	r.setLatency(samples)
	require.InDelta(t, 50.0, *r.P50MS, 0.001)
	require.InDelta(t, 95.0, *r.P95MS, 0.001)
	require.InDelta(t, 99.0, *r.P99MS, 0.001)
}

// requirePostgres fails (never skips) when the benchmark database does not
// answer, naming what to set.
func requirePostgres(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostOf(defaultURL()), 2*time.Second)
	require.NoError(t, err, "no PostgreSQL: set DATABASE_URL or PGOUTBOX_TEST_DATABASE_URL, or start one on 127.0.0.1:5432")
	_ = c.Close()
}

// requireNATS skips the NATS run where no NATS server answers, except in
// CI (CI=true), where .ci/run starts one and its absence is a failure.
func requireNATS(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostOf(natsURL()), 2*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no NATS at %s: %v", natsURL(), err)
	}
	t.Skipf("no NATS at %s (set NATS_URL or start nats-server): %v", natsURL(), err)
}

// requireRabbitMQ skips the test when no RabbitMQ answers at amqpURL(),
// or fails it under CI=true.
func requireRabbitMQ(t *testing.T) {
	t.Helper()
	uri, err := amqp.ParseURI(amqpURL())
	require.NoError(t, err)
	addr := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no RabbitMQ at %s: %v", addr, err)
	}
	t.Skipf("no RabbitMQ at %s (set AMQP_URL or start rabbitmq-server): %v", addr, err)
}
