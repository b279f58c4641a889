package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The writer side and the records of the log relay's fault scenarios
// (issue 27, docs/relay-design.md section 7); chaos.CheckRelay judges
// them. A scenario: newRelayHarness on its pool and schema (the log, the
// keys, the ledger and the cursor log live there), CreateGroup, relays
// whose publisher is a recordingPublisher writing to h.deliveryPath(name)
// with Config.Owner = name, h.startWriters and h.holdOpen while the
// faults run, h.awaitRelayDrain, then chaos.CheckRelay(h.relayInput(...)).

const (
	relayLogName   = "relay_log"
	relayEventType = "chaos.relay"
	// relayLongKey is the key of the transaction held open across ticks.
	relayLongKey = "long"
	// relayStall is the most a wait for a tick or for the drain goes
	// without progress.
	relayStall = 90 * time.Second
)

// relayEmitFunc emits events into the log in the writer's transaction:
// emitter.Emit with Kind log (logEmitter).
type relayEmitFunc func(ctx context.Context, tx pgx.Tx, log outbox.Table, events []outbox.Event) error

// relayEvent is the event of version v of key: its aggregate is the key
// (the relay's order key), its payload the version in decimal.
func relayEvent(id uuid.UUID, key string, v int64) outbox.Event {
	return outbox.Event{ID: id, Type: relayEventType, AggregateID: key, Payload: []byte(strconv.FormatInt(v, 10))}
}

// relayEventKV returns the key and version relayEvent put in e.
func relayEventKV(e outbox.Event) (string, int64, error) {
	v, err := strconv.ParseInt(string(e.Payload), 10, 64)
	return e.AggregateID, v, err
}

// relayHarness is a relay scenario's writer side and records.
type relayHarness struct {
	t      *testing.T
	pool   *pgxpool.Pool // the checker's; writers bring their own
	schema string        // the scenario's: keys, ledger, cursor log
	log    outbox.Table
	names  sqlname.Names
	keys   []string // the writers' keys, k1..kN
	dir    string   // the delivery records, one file per replica
	// emit writes events into the log: emitter.Emit (logEmitter).
	emit relayEmitFunc

	mu         sync.Mutex
	rolledBack []uuid.UUID
	kills      []chaos.Kill
	pauses     []chaos.Pause
	outages    []chaos.Outage
	faults     map[string]int
}

// newRelayHarness migrates the log relay_log (Kind log) into schema,
// creates the keys k1..k<keys> and the ledger, and installs the cursor
// log.
func newRelayHarness(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, keys int) *relayHarness {
	t.Helper()
	log := outbox.Table{Schema: schema, Name: relayLogName}
	require.NoError(t, migrations.Migrate(ctx, pool, migrations.Config{Table: log, Kind: outbox.KindLog}))
	names, err := sqlname.For(log)
	require.NoError(t, err)
	s := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.relay_keys (key text PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
		INSERT INTO %[1]s.relay_keys (key) SELECT 'k' || n FROM generate_series(1, %[2]d) AS n;
		INSERT INTO %[1]s.relay_keys (key) VALUES ('%[3]s');
		CREATE TABLE %[1]s.relay_ledger (
			event_id uuid   PRIMARY KEY,
			key      text   NOT NULL,
			v        bigint NOT NULL,
			xid      xid8   NOT NULL DEFAULT pg_current_xact_id(),
			seq      bigint NOT NULL,
			writer   text   NOT NULL)`, s, keys, relayLongKey))
	require.NoError(t, err)
	require.NoError(t, chaos.InstallCursorLog(ctx, pool, schema, log))
	emit, err := logEmitter(log)
	require.NoError(t, err)
	h := &relayHarness{t: t, pool: pool, schema: schema, log: log, names: names, dir: t.TempDir(),
		emit: emit, faults: map[string]int{}}
	for i := range keys {
		h.keys = append(h.keys, fmt.Sprintf("k%d", i+1))
	}
	return h
}

// qualified returns the quoted name of the scenario's table name.
func (h *relayHarness) qualified(name string) string {
	return pgx.Identifier{h.schema, name}.Sanitize()
}

// relayTx is one business transaction of a writer.
type relayTx struct {
	writer string
	keys   []string // locked in this order: sorted, so writers never deadlock
	// rollback rolls the transaction back on purpose at its end.
	rollback bool
	// savepoint adds, in a savepoint rolled back at once, a second bump
	// of the first key and its event: neither may be seen.
	savepoint bool
	// hold runs between the emit and the commit; nil: a random 0-20ms,
	// so that commits come out of insert order across ticks.
	hold func(context.Context) error
}

// writeTx runs tx: per key, lock its row and bump its version
// (UPDATE ... RETURNING v), emit the key's event, record the ledger rows
// with the log's seq, hold, then commit (or roll back on purpose). The
// end of ctx does not cut a commit short (see commit in chaos_test.go);
// whether a commit that failed did commit is for the ledger to say.
func (h *relayHarness) writeTx(ctx context.Context, pool *pgxpool.Pool, tx relayTx) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayStall)
	defer cancel()
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx, pool, func(t pgx.Tx) error {
		events, err := h.bumpAndEmit(ctx, t, tx.keys)
		if err != nil {
			return err
		}
		for _, e := range events {
			ids = append(ids, e.ID)
		}
		if tx.savepoint {
			if err := h.savepointRolledBack(ctx, t, tx.keys[0]); err != nil {
				return err
			}
		}
		if err := h.recordLedger(ctx, t, events, tx.writer); err != nil {
			return err
		}
		hold := tx.hold
		if hold == nil {
			hold = func(ctx context.Context) error {
				sleepCtx(ctx, rand.N(20*time.Millisecond))
				return nil
			}
		}
		if err := hold(ctx); err != nil {
			return err
		}
		if tx.rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		h.addRolledBack(ids...)
		return nil
	}
	return err
}

// bumpAndEmit locks each key's row, bumps its version and emits its
// event.
func (h *relayHarness) bumpAndEmit(ctx context.Context, tx pgx.Tx, keys []string) ([]outbox.Event, error) {
	events := make([]outbox.Event, 0, len(keys))
	for _, k := range keys {
		var v int64
		if err := tx.QueryRow(ctx, `UPDATE `+h.qualified("relay_keys")+` SET v = v + 1 WHERE key = $1 RETURNING v`, k).Scan(&v); err != nil {
			return nil, err
		}
		events = append(events, relayEvent(uuid.Must(uuid.NewV7()), k, v))
	}
	return events, h.emit(ctx, tx, h.log, events)
}

// savepointRolledBack bumps key again and emits its event in a savepoint
// rolled back at once; the event is recorded as rolled back.
func (h *relayHarness) savepointRolledBack(ctx context.Context, tx pgx.Tx, key string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	events, err := h.bumpAndEmit(ctx, sp, []string{key})
	if err != nil {
		return err
	}
	if err := sp.Rollback(ctx); err != nil {
		return err
	}
	h.addRolledBack(events[0].ID)
	return nil
}

// recordLedger inserts the ledger rows of events, with their seq as the
// log holds it (read back by this transaction's xid, which the ledger's
// default records too).
func (h *relayHarness) recordLedger(ctx context.Context, tx pgx.Tx, events []outbox.Event, writer string) error {
	ids, keys, vs := make([]uuid.UUID, len(events)), make([]string, len(events)), make([]int64, len(events))
	for i, e := range events {
		k, v, err := relayEventKV(e)
		if err != nil {
			return err
		}
		ids[i], keys[i], vs[i] = e.ID, k, v
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+h.qualified("relay_ledger")+` (event_id, key, v, seq, writer)
		SELECT i.id, i.key, i.v, l.seq, $4
		FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS i (id, key, v)
		JOIN `+h.names.Qualified+` AS l ON l.id = i.id AND l.xid = pg_current_xact_id()`, ids, keys, vs, writer)
	if err == nil && tag.RowsAffected() != int64(len(events)) {
		err = fmt.Errorf("ledger: %d of %d events found in the log", tag.RowsAffected(), len(events))
	}
	return err
}

// addRolledBack records events rolled back on purpose.
func (h *relayHarness) addRolledBack(ids ...uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rolledBack = append(h.rolledBack, ids...)
}

// randomTx is a writer's next transaction: 1 to 3 random keys, rolled
// back on purpose one time in ten, with a savepoint rollback one in
// five.
func (h *relayHarness) randomTx(writer string) relayTx {
	keys := slices.Clone(h.keys)
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:1+rand.IntN(min(3, len(keys)))]
	slices.Sort(keys)
	return relayTx{writer: writer, keys: keys, rollback: rand.IntN(10) == 0, savepoint: rand.IntN(5) == 0}
}

// startWriters runs n writers on pool, each committing txs random
// transactions (0: until ctx ends). Errors (a server restarting) are
// retried with the next transaction.
func (h *relayHarness) startWriters(ctx context.Context, pool *pgxpool.Pool, n, txs int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range n {
		name := fmt.Sprintf("writer-%d", w+1)
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && (txs == 0 || i < txs); i++ {
				if err := h.writeTx(ctx, pool, h.randomTx(name)); err != nil {
					sleepCtx(ctx, 10*time.Millisecond)
				}
			}
		})
	}
	return &wg
}

// holdOpen commits one transaction of the key relayLongKey that holds
// after its emit until hold returns (h.ticksPass(100): across 100 ticks).
func (h *relayHarness) holdOpen(ctx context.Context, pool *pgxpool.Pool, hold func(context.Context) error) error {
	return h.writeTx(ctx, pool, relayTx{writer: "long", keys: []string{relayLongKey}, hold: hold})
}

// lastTick returns the newest tick of the log.
func (h *relayHarness) lastTick(ctx context.Context) (int64, error) {
	var id int64
	err := h.pool.QueryRow(ctx, `SELECT max(tick_id) FROM `+h.names.Log(sqlname.SuffixTicks)).Scan(&id)
	return id, err
}

// ticksPass returns a hold that waits, from its start, until n more
// ticks were made; an error when no tick came for relayStall.
func (h *relayHarness) ticksPass(n int64) func(context.Context) error {
	return func(ctx context.Context) error {
		from, err := h.lastTick(ctx)
		if err != nil {
			return err
		}
		_, err = h.awaitTick(ctx, from+n)
		return err
	}
}

// awaitTick waits until tick id exists and returns the newest; an error
// when no new tick came for relayStall. The server may be restarting:
// errors are retried.
func (h *relayHarness) awaitTick(ctx context.Context, id int64) (int64, error) {
	seen, deadline := int64(-1), time.Now().Add(relayStall)
	for time.Now().Before(deadline) {
		last, err := h.lastTick(ctx)
		switch {
		case err == nil && last >= id:
			return last, nil
		case err == nil && last > seen:
			seen, deadline = last, time.Now().Add(relayStall)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		sleepCtx(ctx, 5*time.Millisecond)
	}
	return 0, fmt.Errorf("no tick for %v (newest %d, want %d)", relayStall, seen, id)
}

// deliveryPath is the delivery record file of the replica name.
func (h *relayHarness) deliveryPath(name string) string { return filepath.Join(h.dir, name+".log") }

// deliveries reads every replica's delivery records.
func (h *relayHarness) deliveries() ([]chaos.Delivery, error) {
	files, err := filepath.Glob(filepath.Join(h.dir, "*.log"))
	if err != nil {
		return nil, err
	}
	return chaos.ReadDeliveries(files...)
}

// ledger reads the committed business rows.
func (h *relayHarness) ledger(ctx context.Context) ([]chaos.LedgerEntry, error) {
	rows, err := h.pool.Query(ctx, `SELECT event_id, key, v, xid::text, seq FROM `+h.qualified("relay_ledger"))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (chaos.LedgerEntry, error) {
		var l chaos.LedgerEntry
		var xid string
		if err := r.Scan(&l.ID, &l.Key, &l.V, &xid, &l.Seq); err != nil {
			return l, err
		}
		var err error
		l.Xid, err = strconv.ParseUint(xid, 10, 64)
		return l, err
	})
}

// awaitRelayDrain waits until every committed event was delivered and
// returns when that was first seen; zero when relayStall passed with no
// progress (fewer undelivered events) or ctx ended. Errors (the server
// coming back) are retried.
func (h *relayHarness) awaitRelayDrain(ctx context.Context) time.Time {
	fewest, deadline := -1, time.Now().Add(relayStall)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		left, err := h.undelivered(ctx)
		switch {
		case err == nil && left == 0:
			return time.Now()
		case err == nil && (fewest < 0 || left < fewest):
			fewest, deadline = left, time.Now().Add(relayStall)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return time.Time{}
}

// undelivered counts the committed events not delivered yet.
func (h *relayHarness) undelivered(ctx context.Context) (int, error) {
	ledger, err := h.ledger(ctx)
	if err != nil {
		return 0, err
	}
	ds, err := h.deliveries()
	if err != nil {
		return 0, err
	}
	done := map[uuid.UUID]bool{}
	for _, d := range ds {
		done[d.ID] = true
	}
	left := 0
	for _, l := range ledger {
		if !done[l.ID] {
			left++
		}
	}
	return left, nil
}

// relayInput gathers what the scenario recorded for group.
func (h *relayHarness) relayInput(ctx context.Context, group string, faultsEnded, drained time.Time) chaos.RelayInput {
	t := h.t
	ledger, err := h.ledger(ctx)
	require.NoError(t, err)
	ds, err := h.deliveries()
	require.NoError(t, err)
	cursor, err := chaos.ReadCursorLog(ctx, h.pool, h.schema)
	require.NoError(t, err)
	ticks, err := chaos.ReadTicks(ctx, h.pool, h.schema)
	require.NoError(t, err)
	rows, err := h.pool.Query(ctx, `SELECT id FROM `+h.names.Log(sqlname.SuffixParked)+` WHERE grp = $1`, group)
	require.NoError(t, err)
	parked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	return chaos.RelayInput{
		Group: group, Ledger: ledger, RolledBack: slices.Clone(h.rolledBack), Deliveries: ds,
		Cursor: cursor, Ticks: ticks, Parked: parked,
		Kills: slices.Clone(h.kills), Pauses: slices.Clone(h.pauses), Outages: slices.Clone(h.outages),
		Faults: h.faults, FaultsEnded: faultsEnded, Drained: drained,
	}
}

// recordKill records a SIGKILL (or its stand-in) of the replica name at
// at, counted as a fault of kind.
func (h *relayHarness) recordKill(name string, at time.Time, kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kills = append(h.kills, chaos.Kill{Replica: name, At: at})
	h.faults[kind]++
}

// recordingPublisher is the relay scenarios' publisher wrapper: it
// publishes through next (nil: a broker that acks everything) and, for
// each message acked, writes a delivery record before returning, so every
// record precedes the cursor move the ack allows. A record it cannot
// write stops the process: the records would be incomplete.
type recordingPublisher struct {
	next outbox.Publisher
	rec  *chaos.Recorder
	// tokenOf, when set, returns the group lease token of the batch
	// being published, if the relay passes it in ctx; nil: the checker
	// finds the token from the cursor log.
	tokenOf func(context.Context) uuid.UUID
	calls   atomic.Int64
}

// Publish implements outbox.Publisher.
func (p *recordingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if p.next != nil {
		errs = p.next.Publish(ctx, msgs)
	}
	call := p.calls.Add(1)
	var tok uuid.UUID
	if p.tokenOf != nil {
		tok = p.tokenOf(ctx)
	}
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		key, v, err := relayEventKV(m.Event)
		if err == nil {
			err = p.rec.WriteDelivery(chaos.Delivery{ID: m.Event.ID, Key: key, V: v, Call: call, Token: tok})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay chaos: record:", err)
			os.Exit(3)
		}
	}
	return errs
}

// switchBroker is a broker that acks everything, except while the file
// at down exists: then it refuses every message with
// outbox.ErrUnavailable (an outage, for the relay's circuit). A file, so
// that the test process can take the broker of a child relay down
// (h.brokerDown).
type switchBroker struct{ down string }

// Publish implements outbox.Publisher.
func (b switchBroker) Publish(_ context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if _, err := os.Stat(b.down); err == nil {
		for i := range errs {
			errs[i] = outbox.ErrUnavailable
		}
	}
	return errs
}

// brokerSwitch is the file whose existence takes every switchBroker of
// the scenario down.
func (h *relayHarness) brokerSwitch() string { return filepath.Join(h.dir, "broker-down") }

// brokerDown takes the scenario's switchBrokers down for d, then up, and
// counts the fault. It is no server outage: it must explain no
// duplicate (the relay keeps unacked events in memory and moves nothing).
func (h *relayHarness) brokerDown(d time.Duration) {
	require.NoError(h.t, os.WriteFile(h.brokerSwitch(), nil, 0o644))
	time.Sleep(d)
	require.NoError(h.t, os.Remove(h.brokerSwitch()))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults["broker outages"]++
}
