package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
	"github.com/pgoutbox/pgoutbox/integration/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The log relay's fault scenarios (issue 27, docs/relay-design.md
// section 7): each starts a PostgreSQL cluster of its own, relay
// replicas as child processes (this test binary in the role
// roleRelayReplica, running runRelayReplica), writers in this process
// (relay_chaos_harness_test.go), injects its faults, waits until every
// committed event was acked, and hands the records to chaos.CheckRelay,
// which must find no violation.
//
// A replica runs relay.Relay (runRelayReplica, relay_chaos_relay_test.go);
// the scenarios themselves are in relay_chaos_scenarios_test.go.

const (
	roleRelayReplica = "relay-chaos-replica"
	envRelayReplica  = "PGOUTBOX_IT_RELAY_REPLICA"
	relayChaosSchema = "chaos"
	relayGroup       = "g"
)

func init() { runChildRole(roleRelayReplica, childRelayReplica) }

// relayReplicaConfig is what a relay replica process is told.
type relayReplicaConfig struct {
	// Name is the replica's name: its Owner (the cursor log records it
	// with each take; the checker finds a delivery's token through it)
	// and its sessions' application_name.
	Name       string
	Deliveries string // its delivery record file
	Log        outbox.Table
	Group      string
	Lease      time.Duration // ticker and group lease
	// Ticker and Reader say whether it ticks and whether it reads the
	// group (a relay with NoTicker is a reader only; one that does not
	// read the group reads relayTickerGroup instead).
	Ticker, Reader bool
	// BrokerDown is the switchBroker's file.
	BrokerDown string
}

// childRelayReplica is a relay replica process: runRelayReplica until
// killed or until its stdin closes.
func childRelayReplica() error {
	var rc relayReplicaConfig
	if err := json.Unmarshal([]byte(os.Getenv(envRelayReplica)), &rc); err != nil {
		return err
	}
	rec, err := chaos.NewRecorder(rc.Deliveries, rc.Name)
	if err != nil {
		return err
	}
	defer func() { _ = rec.Close() }()
	cfg, err := pgxpool.ParseConfig(os.Getenv(envChildURL))
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = rc.Name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = fmt.Fscanln(os.Stdin) // returns when stdin closes
		stop()
	}()
	fmt.Println(childReady)
	return runRelayReplica(ctx, pool, rc, &recordingPublisher{next: switchBroker{down: rc.BrokerDown}, rec: rec})
}

// relaySlot is one replica's role; a killed replica is replaced in its
// slot by the next incarnation.
type relaySlot struct{ Ticker, Reader bool }

// relayScenario is what one relay scenario configures.
type relayScenario struct {
	name    string // its key in docs/reliability.md: "relay-<name>"
	slots   []relaySlot
	writers int
	keys    int
	lease   time.Duration
	// longTx holds one transaction open across 100 ticks during the
	// faults.
	longTx bool
	// inject runs the faults until ctx ends and returns when every one
	// healed.
	inject func(ctx context.Context, rc *relayChaos)
}

// relayChaos is a running relay scenario.
type relayChaos struct {
	*relayHarness
	sc      relayScenario
	cluster *pgcluster.Cluster

	smu   sync.Mutex
	procs []*relayProc // per slot
}

// relayProc is one replica process.
type relayProc struct {
	name string
	c    *childProcess
}

// runRelayChaos runs sc: cluster, log, group, replicas, writers (and the
// long transaction), faults, drain, check.
func runRelayChaos(t *testing.T, sc relayScenario) chaos.RelayReport {
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	cluster := pgcluster.Start(t)
	pool := chaosPool(t, ctx, cluster.URL, "checker")
	h := newRelayHarness(t, ctx, pool, relayChaosSchema, sc.keys)
	require.NoError(t, createRelayGroups(ctx, pool, h.log, relayGroup, slices.ContainsFunc(sc.slots, isTickerOnly)))
	rc := &relayChaos{relayHarness: h, sc: sc, cluster: cluster}
	for i := range sc.slots {
		rc.procs = append(rc.procs, rc.start(i, 1))
	}
	faultCtx, stopFaults := context.WithCancel(ctx)
	go func() { sleepCtx(faultCtx, relayFaultTime(t)); stopFaults() }()
	writerPool := chaosPool(t, ctx, cluster.URL, "writers")
	writeCtx, stopWriters := context.WithCancel(ctx)
	writers := h.startWriters(writeCtx, writerPool, sc.writers, 0)
	long := rc.holdLong(ctx, writerPool) // not cut by the faults' end: it retries until one commits
	sc.inject(faultCtx, rc)
	// The writers go on until the long transaction committed: without
	// them, a relay ticks once per IdleTick only, and 100 ticks after a
	// fault cut it short would take minutes.
	longCommitted := <-long
	stopWriters()
	writers.Wait()
	faultsEnded := time.Now()
	drained := h.awaitRelayDrain(ctx)
	rc.stopAll()
	rep := chaos.CheckRelay(h.relayInput(ctx, relayGroup, faultsEnded, drained))
	t.Logf("relay scenario %s:\n%s", sc.name, rep)
	writeChaosFigures(t, "relay-"+sc.name, rep)
	require.Empty(t, rep.Violations(), "relay scenario %s:\n%s", sc.name, rep)
	require.Positive(t, rep.Events, "nothing was committed")
	if sc.longTx {
		require.True(t, longCommitted, "the long transaction never committed")
	}
	return rep
}

// holdLong commits, when the scenario asks for it, one transaction held
// open across 100 ticks, trying again after a failure (a server restart)
// until one commits or ctx ends, also after the faults ended; the
// channel says whether one did.
func (rc *relayChaos) holdLong(ctx context.Context, pool *pgxpool.Pool) <-chan bool {
	done := make(chan bool, 1)
	if !rc.sc.longTx {
		done <- false
		return done
	}
	go func() {
		for ctx.Err() == nil {
			if rc.holdOpen(ctx, pool, rc.ticksPass(100)) == nil {
				done <- true
				return
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		done <- false
	}()
	return done
}

// start starts incarnation n of slot i.
func (rc *relayChaos) start(i, n int) *relayProc {
	name := fmt.Sprintf("r%d.%d", i+1, n)
	s := rc.sc.slots[i]
	cfg, err := json.Marshal(relayReplicaConfig{
		Name: name, Deliveries: rc.deliveryPath(name), Log: rc.log, Group: relayGroup, Lease: rc.sc.lease,
		Ticker: s.Ticker, Reader: s.Reader, BrokerDown: rc.brokerSwitch(),
	})
	require.NoError(rc.t, err)
	c := startChild(rc.t, &pgtest.DB{URL: rc.cluster.URL, Schema: relayChaosSchema}, roleRelayReplica, envRelayReplica+"="+string(cfg))
	return &relayProc{name: name, c: c}
}

// kill SIGKILLs the replica of slot i and starts its next incarnation.
// The kill is recorded at the signal or at the replica's last delivery
// record, whichever is later (see replace in chaos_test.go).
func (rc *relayChaos) kill(i int, kind string) {
	rc.smu.Lock()
	p := rc.procs[i]
	rc.smu.Unlock()
	killed := time.Now()
	require.NoError(rc.t, p.c.cmd.Process.Kill())
	requireKilled(rc.t, p.c.cmd.Wait(), p.c)
	if ds, err := readDeliveriesOf(rc.deliveryPath(p.name)); err == nil && len(ds) > 0 && ds[len(ds)-1].At.After(killed) {
		killed = ds[len(ds)-1].At
	}
	rc.recordKill(p.name, killed, kind)
	n, _ := strconv.Atoi(p.name[strings.IndexByte(p.name, '.')+1:])
	next := rc.start(i, n+1)
	rc.smu.Lock()
	rc.procs[i] = next
	rc.smu.Unlock()
}

// readDeliveriesOf reads one replica's records; none when it wrote none.
func readDeliveriesOf(path string) ([]chaos.Delivery, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil //nolint:nilerr // no file: no delivery yet
	}
	return chaos.ReadDeliveries(path)
}

// pause SIGSTOPs the replica of slot i for d, then SIGCONTs it.
func (rc *relayChaos) pause(i int, d time.Duration) {
	rc.smu.Lock()
	p := rc.procs[i]
	rc.smu.Unlock()
	from := time.Now()
	require.NoError(rc.t, p.c.cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(d)
	require.NoError(rc.t, p.c.cmd.Process.Signal(syscall.SIGCONT))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.pauses = append(rc.pauses, chaos.Pause{Replica: p.name, From: from, To: time.Now()})
	rc.faults["SIGSTOPs"]++
}

// restartServer restarts the cluster immediately (a crash and its
// recovery), recorded as an outage.
func (rc *relayChaos) restartServer() {
	from := time.Now()
	require.NoError(rc.t, rc.cluster.RestartImmediate())
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.outages = append(rc.outages, chaos.Outage{From: from, To: time.Now()})
	rc.faults["immediate restarts"]++
}

// stopAll closes every replica's stdin and waits for its clean exit.
func (rc *relayChaos) stopAll() {
	rc.smu.Lock()
	defer rc.smu.Unlock()
	for _, p := range rc.procs {
		_ = p.c.stdin.Close()
	}
	for _, p := range rc.procs {
		require.NoError(rc.t, p.c.cmd.Wait(), "replica %s did not stop cleanly: %s", p.name, p.c.stderr)
	}
}

// randomSlot returns a random slot whose role matches pick.
func (rc *relayChaos) randomSlot(pick func(relaySlot) bool) int {
	var is []int
	for i, s := range rc.sc.slots {
		if pick(s) {
			is = append(is, i)
		}
	}
	return is[rand.IntN(len(is))]
}

// relayShort is how long a relay scenario injects faults in its short
// version (make test): a few faults each, so that all of them together
// stay well under a minute on a 2-core machine.
const relayShort = 3 * time.Second

// relayFaultTime is how long a relay scenario injects faults:
// chaosFaultTime in the long version (make chaos), else relayShort.
func relayFaultTime(t *testing.T) time.Duration {
	if chaosLong() {
		return chaosFaultTime(t)
	}
	return relayShort
}

// groupHolder returns the slot whose replica holds the group's lease; a
// random reader slot when none does (or the holder was replaced).
func (rc *relayChaos) groupHolder(ctx context.Context) int {
	var owner string
	err := rc.pool.QueryRow(ctx, `SELECT coalesce(owner, '') FROM `+rc.names.Log(sqlname.SuffixCursors)+`
		WHERE grp = $1 AND lease_until > now()`, relayGroup).Scan(&owner)
	if err == nil {
		rc.smu.Lock()
		defer rc.smu.Unlock()
		for i, p := range rc.procs {
			if p.name == owner {
				return i
			}
		}
	}
	return rc.randomSlot(func(s relaySlot) bool { return s.Reader })
}
