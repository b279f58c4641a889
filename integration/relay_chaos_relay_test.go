package integration_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/relay"
)

// The relay as the scenarios run it: runRelayReplica's relay.Relay in
// each replica process, createRelayGroups' groups, and the emitter the
// writers emit with.

// relayTickerGroup is the group a ticker-only slot reads: relay.Config
// always has a reader, so a replica that should only tick reads a group
// of its own, created From Latest and published to nowhere. It is read
// all along, so it holds no retention back.
const relayTickerGroup = "tickers"

// runRelayReplica runs the relay of cfg until ctx ends: relay.Start,
// tried again while its start-up checks fail (the server may be
// restarting when a replica starts), then the wait for its end. It
// returns nil on a clean stop, and the relay's error when it ended on its
// own (a service's error, a stopped group): the scenario then fails,
// since the replica did not stop cleanly.
func runRelayReplica(ctx context.Context, pool *pgxpool.Pool, cfg relayReplicaConfig, pub outbox.Publisher) error {
	rc := relayConfig(pool, cfg, pub)
	for {
		r, err := relay.New(rc)
		if err != nil {
			return err
		}
		err = r.Start(ctx)
		if err == nil {
			<-r.Done()
			return r.Err()
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintln(os.Stderr, "relay replica: start:", err)
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// relayConfig is the relay.Config of a replica: cfg's log, group, owner
// and roles, both leases cfg.Lease, batches of at most 64 events (so that
// a backlog cuts batches inside a tick), a circuit that probes again
// within 0.5s, and retention every 250ms on the ticker's holder. A
// ticker-only slot reads relayTickerGroup and discards what it reads.
func relayConfig(pool *pgxpool.Pool, cfg relayReplicaConfig, pub outbox.Publisher) relay.Config {
	group := cfg.Group
	if !cfg.Reader {
		group, pub = relayTickerGroup, discardPublisher{}
	}
	return relay.Config{
		Pool: pool, Log: cfg.Log, Group: group, Owner: cfg.Name, Publisher: pub,
		NoTicker: !cfg.Ticker, TickerLease: cfg.Lease, GroupLease: cfg.Lease,
		MaxBatch: 64, CircuitMinBackoff: 50 * time.Millisecond, CircuitMaxBackoff: 500 * time.Millisecond,
		RetentionInterval: 250 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// discardPublisher acks every message and keeps none.
type discardPublisher struct{}

// Publish implements outbox.Publisher.
func (discardPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}

// createRelayGroups creates the scenarios' group at the oldest tick and,
// when tickerOnly (a scenario has ticker-only slots, which read it),
// relayTickerGroup at the newest: a group nobody reads would hold
// retention back.
func createRelayGroups(ctx context.Context, pool *pgxpool.Pool, log outbox.Table, group string, tickerOnly bool) error {
	if err := relay.CreateGroup(ctx, pool, log, group, relay.Oldest); err != nil {
		return err
	}
	if !tickerOnly {
		return nil
	}
	return relay.CreateGroup(ctx, pool, log, relayTickerGroup, relay.Latest)
}

// logEmitter returns the relayEmitFunc of emitter.Emit into a log
// (emitter.Config.Kind outbox.KindLog).
func logEmitter(log outbox.Table) (relayEmitFunc, error) {
	em, err := emitter.New(emitter.Config{Table: log, Kind: outbox.KindLog})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx, to outbox.Table, events []outbox.Event) error {
		if to != log {
			return errors.New("relay chaos: emit into another log than the emitter's")
		}
		_, err := em.Emit(ctx, tx, events...)
		return err
	}, nil
}
