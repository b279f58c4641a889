package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// lazyPool is a pool of the test database that never connects unless
// used: the relay's tests with fake services only need Config.Pool set.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// nopPublisher acks every message.
type nopPublisher struct{}

func (nopPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}

// validConfig is a Config that passes validate, its services the fakes of
// fs.
func validConfig(t *testing.T, fs *fakes) Config {
	t.Helper()
	cfg := Config{
		Pool: lazyPool(t), Log: outbox.Table{Name: "events_log"}, Group: "g1", Publisher: nopPublisher{},
		Logger: discardLogger(),
	}
	if fs != nil {
		cfg.newServices = fs.build
	}
	return cfg
}

// fakes are fake services: a ticker, a reader that drains, and the
// probes, recording the order in which they start and stop.
type fakes struct {
	mu        sync.Mutex
	events    []string // "start ticker", "stop reader", ...
	rec       *recorder
	verifyErr error
	checkErr  error
	verified  int

	readerFail chan error    // an error sent here ends the reader
	drainHold  chan struct{} // when set, the reader's drain waits for it to close
	drained    chan struct{} // closed when the reader is asked to drain
	drainOnce  sync.Once
	sample     sample
	sampleErr  error
	circuit    circuit.State
	openSince  time.Time
}

func newFakes() *fakes {
	return &fakes{readerFail: make(chan error, 1), drained: make(chan struct{})}
}

func (f *fakes) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, s)
}

func (f *fakes) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

func (f *fakes) build(_ Config, rec *recorder) (services, error) {
	f.rec = rec
	ticker := service{name: "ticker", run: func(ctx context.Context) error {
		f.note("start ticker")
		<-ctx.Done()
		f.note("stop ticker")
		return ctx.Err()
	}}
	reader := service{name: "reader", run: func(ctx context.Context) error {
		f.note("start reader")
		select {
		case <-ctx.Done():
			f.note("cancel reader")
			return ctx.Err()
		case err := <-f.readerFail:
			f.note("fail reader")
			return err
		case <-f.drained:
		}
		if f.drainHold != nil {
			select {
			case <-f.drainHold:
			case <-ctx.Done():
				f.note("cancel reader")
				return ctx.Err()
			}
		}
		f.note("stop reader")
		return nil
	}, drain: func() { f.drainOnce.Do(func() { close(f.drained) }) }}
	return services{
		verify: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.verified++
			return f.verifyErr
		},
		check: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.checkErr
		},
		parts: []service{ticker, reader},
		sample: func(context.Context) (sample, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.sample, f.sampleErr
		},
		tickerHeld: func() bool { return true },
		groupHeld:  func() bool { return true },
		circuit: func() (circuit.State, time.Time) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.circuit, f.openSince
		},
		close: func() { f.note("close") },
	}, nil
}

// newRelay returns a relay of cfg, failing the test on error.
func newRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	r, err := New(cfg)
	require.NoError(t, err)
	return r
}

// stop stops r, bounded by the test's budget.
func stop(t *testing.T, r *Relay) error {
	t.Helper()
	return r.Stop(testctx.New(t))
}

var errBoom = errors.New("boom")
