package integration_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// The log relay's fault scenarios (docs/reliability.md, "The log
// relay's scenarios"). Each runs on runRelayChaos: relay replicas as
// child processes with leases of 1s, 3 writers committing out of order,
// rolling back on purpose and in savepoints, and one transaction held
// open across 100 ticks; then the drain and chaos.CheckRelay. The short
// versions inject faults for relayShort, the long ones (make chaos) for
// CHAOS_DURATION.

// Slot roles: a full replica (ticker and reader), a reader only, a
// ticker only (it reads relayTickerGroup).
var (
	relayFull       = relaySlot{Ticker: true, Reader: true}
	relayReaderOnly = relaySlot{Reader: true}
	relayTickerOnly = relaySlot{Ticker: true}
)

func isReader(s relaySlot) bool     { return s.Reader }
func isTickerOnly(s relaySlot) bool { return s.Ticker && !s.Reader }

// TestChaosRelayKill: 3 full replicas; every 0.2-1s one is SIGKILLed and
// restarted: the holder of the group two times in three, else one picked
// at random. A kill between a batch's acks and
// its cursor move makes the next holder publish the batch again
// (duplicated, cause "kill").
func TestChaosRelayKill(t *testing.T) {
	t.Parallel()
	rep := runRelayChaos(t, relayScenario{
		name: "kill", slots: []relaySlot{relayFull, relayFull, relayFull}, writers: 3, keys: 8,
		lease: time.Second, longTx: true,
		inject: func(ctx context.Context, rc *relayChaos) {
			atRandomIntervals(ctx, 200*time.Millisecond, time.Second, func() {
				i := rc.randomSlot(isReader)
				if rand.IntN(3) > 0 {
					i = rc.groupHolder(ctx)
				}
				rc.kill(i, "reader SIGKILLs")
			})
		},
	})
	require.Positive(t, rep.Takes)
}

// TestChaosRelayKillTicker: 2 readers that do not tick and 2 tickers
// (ticker-only slots); a random ticker is SIGKILLed every 0.3-1s and
// restarted. Ticks pause until the other ticker takes the lease (up to
// 1s); readers wait, nothing else may change.
func TestChaosRelayKillTicker(t *testing.T) {
	t.Parallel()
	runRelayChaos(t, relayScenario{
		name: "kill-ticker", slots: []relaySlot{relayReaderOnly, relayReaderOnly, relayTickerOnly, relayTickerOnly},
		writers: 3, keys: 8, lease: time.Second, longTx: true,
		inject: func(ctx context.Context, rc *relayChaos) {
			atRandomIntervals(ctx, 300*time.Millisecond, time.Second, func() {
				rc.kill(rc.randomSlot(isTickerOnly), "ticker SIGKILLs")
			})
		},
	})
}

// TestChaosRelayRestartServer: 2 full replicas; the cluster is restarted
// immediately (pg_ctl restart -m immediate: a crash and its recovery)
// 0.5-1.5s after the previous restart healed.
func TestChaosRelayRestartServer(t *testing.T) {
	t.Parallel()
	runRelayChaos(t, relayScenario{
		name: "restart", slots: []relaySlot{relayFull, relayFull}, writers: 3, keys: 8,
		lease: time.Second, longTx: true,
		inject: func(ctx context.Context, rc *relayChaos) {
			atRandomIntervals(ctx, 500*time.Millisecond, 1500*time.Millisecond, rc.restartServer)
		},
	})
}

// TestChaosRelayBrokerDown: 2 full replicas; the broker refuses every
// message (outbox.ErrUnavailable) for 0.3-1s, then is back for 0.3-1s,
// over and over. The relay's circuit opens and probes; unacked events
// stay in memory: nothing is parked, and no fault explains a duplicate,
// so any would be a violation.
func TestChaosRelayBrokerDown(t *testing.T) {
	t.Parallel()
	var rc0 *relayChaos
	rep := runRelayChaos(t, relayScenario{
		name: "broker-down", slots: []relaySlot{relayFull, relayFull}, writers: 3, keys: 8,
		lease: time.Second, longTx: true,
		inject: func(ctx context.Context, rc *relayChaos) {
			rc0 = rc
			atRandomIntervals(ctx, 300*time.Millisecond, time.Second, func() {
				rc.brokerDown(randBetween(300*time.Millisecond, time.Second))
			})
		},
	})
	require.Empty(t, rep.Duplicates, "a broker outage explains no duplicate")
	require.Positive(t, rep.Faults["broker outages"])
	var parked, keys int
	ctx := testctx.New(t)
	require.NoError(t, rc0.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+rc0.names.Log(sqlname.SuffixParked)+`),
		(SELECT count(*) FROM `+rc0.names.Log(sqlname.SuffixParkedKeys)+`)`).Scan(&parked, &keys))
	require.Zero(t, parked, "events parked by a broker outage")
	require.Zero(t, keys, "keys parked by a broker outage")
}

// TestChaosRelayRace: 2 full replicas racing for the group; the one
// holding its lease is SIGSTOPped for 2-3 leases, then SIGCONTed, 0.3-1s
// after the previous pause. The other takes the group; the paused one,
// resumed, may publish what it held (duplicated, cause "lease lost"), and
// its cursor move must be fenced off.
func TestChaosRelayRace(t *testing.T) {
	t.Parallel()
	rep := runRelayChaos(t, relayScenario{
		name: "race", slots: []relaySlot{relayFull, relayFull}, writers: 3, keys: 8,
		lease: time.Second, longTx: true,
		inject: func(ctx context.Context, rc *relayChaos) {
			atRandomIntervals(ctx, 300*time.Millisecond, time.Second, func() {
				rc.pause(rc.groupHolder(ctx), randBetween(2*rc.sc.lease, 3*rc.sc.lease))
			})
		},
	})
	require.Greater(t, rep.Takes, 1, "the group never changed hands")
}
