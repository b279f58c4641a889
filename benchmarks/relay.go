package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
	"github.com/pgoutbox/pgoutbox/relay"
)

// relayGroup is the consumer group the relay case reads for.
const relayGroup = "bench"

// runRelay runs the log relay (issue 27, package relay) on benchLog:
// throughput (drain a backlog of N events emitted first, MaxBatch -batch,
// to -publisher noop, kfake or nats), latency (commit → publish at -rate
// events/s for -duration, the relay's defaults) and longtx (the rate of
// other events with and without one transaction held open for -hold).
func runRelay(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{{"throughput", relayThroughput}, {"latency", relayLatency}, {"longtx", relayLongTx}})
}

// openLogDB is a fresh migrated database with the log benchLog beside
// the outbox, and a consumer group relayGroup created on it (Latest: it
// starts with the events emitted from now on).
func openLogDB(ctx context.Context, o Options, conns int) (*benchDB, error) {
	db, err := openDB(ctx, o.URL, conns)
	if err != nil {
		return nil, err
	}
	err = db.migrate(ctx)
	if err == nil {
		err = migrateLog(ctx, db)
	}
	if err == nil {
		err = relay.CreateGroup(ctx, db.pool, benchLog, relayGroup, relay.Latest)
	}
	if err == nil {
		err = db.warm(ctx, conns)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// countingPublisher counts what its publisher acked and calls stamp (when
// set) with every acked message, after the publisher returned.
type countingPublisher struct {
	pub   outbox.Publisher
	acked atomic.Int64
	stamp func(outbox.Message)
}

func (p *countingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := p.pub.Publish(ctx, msgs)
	n := int64(0)
	for i, m := range msgs {
		if errs == nil || errs[i] == nil {
			n++
			if p.stamp != nil {
				p.stamp(m)
			}
		}
	}
	p.acked.Add(n)
	return errs
}

// nopPublisher acks every message without doing anything.
type nopPublisher struct{}

func (nopPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}

// broker is the destination of a relay run: its publisher, a check that
// it holds n messages (nil: none beyond the count of acks) and what to
// close afterwards.
type broker struct {
	pub   outbox.Publisher
	check func(ctx context.Context, n int) error
	close func()
}

// openBroker opens -publisher: noop, kfake (kafkapub to an in-process
// kfake cluster, as dispatch-kafka) or nats (natspub to a fresh JetStream
// stream on the local NATS, as dispatch-nats).
func openBroker(ctx context.Context, name string) (*broker, error) {
	switch name {
	case "", "noop":
		return &broker{pub: nopPublisher{}, close: func() {}}, nil
	case "kfake":
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, eventType))
		if err != nil {
			return nil, err
		}
		pub, err := kafkapub.NewFromOpts(kafkapub.Config{}, kgo.SeedBrokers(cluster.ListenAddrs()...))
		if err != nil {
			cluster.Close()
			return nil, err
		}
		return &broker{pub: pub, close: func() { pub.Close(); cluster.Close() }}, nil
	case "nats":
		return openNATS(ctx)
	}
	return nil, fmt.Errorf("unknown -publisher %q (noop, kfake, nats)", name)
}

func openNATS(ctx context.Context) (*broker, error) {
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("no NATS at %s (set NATS_URL): %w", natsURL(), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	prefix := fmt.Sprintf("relay%d.", time.Now().UnixNano())
	name := "PGOUTBOX_" + prefix[:len(prefix)-1]
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}})
	if err != nil {
		nc.Close()
		return nil, err
	}
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &broker{pub: pub,
		check: func(ctx context.Context, n int) error {
			info, err := stream.Info(ctx)
			if err == nil && info.State.Msgs != uint64(n) {
				err = fmt.Errorf("verify: the stream holds %d messages, want %d", info.State.Msgs, n)
			}
			return err
		},
		close: func() {
			_ = js.DeleteStream(context.WithoutCancel(ctx), name)
			nc.Close()
		}}, nil
}

// newBenchRelay builds the relay of a run: benchLog, relayGroup, pub,
// maxBatch (0: the default), everything else the relay's defaults.
func newBenchRelay(db *benchDB, pub outbox.Publisher, maxBatch int) (*relay.Relay, error) {
	return relay.New(relay.Config{Pool: db.pool, Log: benchLog, Group: relayGroup, Owner: "bench", Publisher: pub,
		MaxBatch: maxBatch, Logger: quietLogger})
}

// emitBacklog writes n events into the log through the log emitter, keys
// partition keys round robin, then vacuums and analyzes the log as
// preload does the outbox. By default it writes 5,000 events a
// transaction (the emitter's COPY) from 2 writers and no tick is made
// meanwhile: the relay's first tick holds the whole backlog, which it
// reads in MaxBatch pieces (a relay started on a backlog). With -ticked
// it writes -batch events a transaction from one writer and makes a tick
// after each (a backlog that built up while a ticker ran: a relay that
// was stopped or fell behind).
func emitBacklog(ctx context.Context, db *benchDB, o Options) error {
	em, err := logEmitter(o)
	if err != nil {
		return err
	}
	body := payload(o.Payload)
	var written atomic.Int64
	write := func(ctx context.Context, tx pgx.Tx, k int) error {
		events := make([]outbox.Event, k)
		for i := range events {
			events[i] = outbox.Event{Type: eventType, Payload: body, PartitionKey: benchKey(written.Add(1), o.Keys)}
		}
		_, err := em.Emit(ctx, tx, events...)
		return err
	}
	if o.Ticked {
		err = emitTicked(ctx, db, o, write)
	} else {
		err = inTxs(ctx, db, 2, o.N, 5000, write)
	}
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, `VACUUM ANALYZE event_log`)
	return err
}

// emitTicked commits -batch events a transaction and makes a tick after
// each, holding the ticker's lease meanwhile (released at the end, for
// the relay's ticker).
func emitTicked(ctx context.Context, db *benchDB, o Options, write func(context.Context, pgx.Tx, int) error) error {
	st, err := store.New(db.pool, benchLog)
	if err != nil {
		return err
	}
	token := uuid.New()
	if held, err := st.TakeTicker(ctx, "bench-backlog", token, time.Minute); err != nil || !held {
		return fmt.Errorf("take the ticker (held %v): %w", held, err)
	}
	defer func() { _ = st.ReleaseTicker(context.WithoutCancel(ctx), token) }()
	for done := 0; done < o.N; done += o.Batch {
		k := min(o.Batch, o.N-done)
		if err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return write(ctx, tx, k) }); err != nil {
			return err
		}
		if _, _, err := st.Tick(ctx, token, time.Hour); err != nil {
			return err
		}
	}
	return nil
}

// relayThroughput emits a backlog of N events into the log, then times a
// relay (MaxBatch -batch) draining it to -publisher, from Start until it
// recorded N published; it verifies that the publisher acked exactly N
// and, for nats, that the stream holds N messages.
func relayThroughput(ctx context.Context, o Options) (Result, error) {
	db, err := openLogDB(ctx, o, 8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	if err := emitBacklog(ctx, db, o); err != nil {
		return Result{}, err
	}
	b, err := openBroker(ctx, o.Publisher)
	if err != nil {
		return Result{}, err
	}
	defer b.close()
	pub := &countingPublisher{pub: b.pub}
	r, err := newBenchRelay(db, pub, o.Batch)
	if err != nil {
		return Result{}, err
	}
	trips0 := db.trips.total()
	if o.SQLTime {
		db.trips.stmts = &stmtTimes{}
		db.trips.stmts.reset()
	}
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		return Result{}, err
	}
	err = awaitPublished(ctx, r, uint64(o.N))
	elapsed := time.Since(start)
	if stopErr := stopWithin(ctx, r.Stop); err == nil {
		err = stopErr
	}
	if err != nil {
		return Result{}, err
	}
	s := r.Stats()
	res := throughput("throughput", o.N, elapsed)
	res.Params = map[string]any{"publisher": cmpOr(o.Publisher, "noop"), "max_batch": o.Batch, "keys": o.Keys, "conns": 8, "ticked": o.Ticked,
		"batches": s.Batches, "ticks": s.Ticks, "errors": s.Errors, "round_trips": db.trips.total() - trips0}
	if o.SQLTime {
		res.Params["sql_ms"] = db.trips.stmts.snapshot()
	}
	err = checkDrained(ctx, b, pub, s, o.N)
	res.Verified = err == nil
	return res, err
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkDrained checks that the relay published exactly n events and the
// publisher acked exactly n, and the broker's own count.
func checkDrained(ctx context.Context, b *broker, pub *countingPublisher, s relay.Stats, n int) error {
	if s.Published != uint64(n) || s.Parked != 0 {
		return fmt.Errorf("verify: the relay published %d and parked %d, want %d and 0", s.Published, s.Parked, n)
	}
	if got := pub.acked.Load(); got != int64(n) {
		return fmt.Errorf("verify: the publisher acked %d messages, want %d", got, n)
	}
	if b.check != nil {
		return b.check(ctx, n)
	}
	return nil
}

// awaitPublished waits until the relay recorded n events published,
// reading its Stats (atomic loads) every millisecond: a drain of 50,000
// events takes about 150 ms in pieces of 1,000, and the 20 ms steps that
// runUntil takes before the last 2% of a dispatcher's run overstated it
// by up to 13%. A relay that stops fails it.
func awaitPublished(ctx context.Context, r *relay.Relay, n uint64) error {
	for r.Stats().Published < n {
		select {
		case <-r.Done():
			return fmt.Errorf("relay stopped early: %w", r.Err())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// awaitRelaying waits (at most 30s) until the relay holds the ticker and
// its group, so that start-up does not count in a latency run.
func awaitRelaying(ctx context.Context, r *relay.Relay) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		h := r.Health()
		if h.State == relay.StateRunning && h.TickerHeld && h.GroupHeld {
			return nil
		}
		select {
		case <-r.Done():
			return fmt.Errorf("relay stopped early: %w", r.Err())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("relay not relaying after 30s")
}

// stampPublished records, in lr.started, when the publisher acked each
// message with a valid bench-seq header.
func (lr *latencyRun) stampPublished(m outbox.Message) {
	now := time.Now().UnixNano()
	i, err := strconv.Atoi(m.Event.Headers["bench-seq"])
	if err == nil && i >= 0 && i < len(lr.started) {
		lr.started[i].CompareAndSwap(0, now)
	}
}

// relayRun is a running relay of a latency or longtx run: its database,
// the relay, the counting publisher and the clocks.
type relayRun struct {
	db    *benchDB
	r     *relay.Relay
	b     *broker
	pub   *countingPublisher
	lr    *latencyRun
	total int
}

// startRelayRun opens the database, the broker and a relay with the
// default tick and batch, and waits until it relays; slots is the number
// of clocks (one per event).
func startRelayRun(ctx context.Context, o Options, slots int) (*relayRun, error) {
	db, err := openLogDB(ctx, o, latencyWriters+8)
	if err != nil {
		return nil, err
	}
	b, err := openBroker(ctx, o.Publisher)
	if err != nil {
		db.Close()
		return nil, err
	}
	rr := &relayRun{db: db, b: b, lr: &latencyRun{committed: make([]atomic.Int64, slots), started: make([]atomic.Int64, slots)}, total: slots}
	rr.pub = &countingPublisher{pub: b.pub, stamp: rr.lr.stampPublished}
	if rr.r, err = newBenchRelay(db, rr.pub, 0); err == nil {
		if err = rr.r.Start(ctx); err == nil {
			err = awaitRelaying(ctx, rr.r)
		}
	}
	if err != nil {
		rr.close(ctx)
		return nil, err
	}
	return rr, nil
}

// close stops the relay and closes the broker and the database.
func (rr *relayRun) close(ctx context.Context) {
	if rr.r != nil {
		_ = stopWithin(ctx, rr.r.Stop)
	}
	rr.b.close()
	rr.db.Close()
}

// finish waits until the relay published n events, stops it and checks
// every event was published once.
func (rr *relayRun) finish(ctx context.Context, n int) error {
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := awaitPublished(waitCtx, rr.r, uint64(n)); err != nil {
		return fmt.Errorf("published %d of %d: %w", rr.r.Stats().Published, n, err)
	}
	if err := stopWithin(ctx, rr.r.Stop); err != nil {
		return err
	}
	return checkDrained(ctx, rr.b, rr.pub, rr.r.Stats(), n)
}

// generate commits events 0..n-1 into the log, one per transaction, at
// rate per second from latencyWriters writers (lr.write), stamping their
// commit times.
func (rr *relayRun) generate(ctx context.Context, o Options, n int) error {
	em, err := logEmitter(o)
	if err != nil {
		return err
	}
	jobs := make(chan int, latencyWriters)
	g, gctx := errgroup.WithContext(ctx)
	for range latencyWriters {
		g.Go(func() error { return rr.lr.write(gctx, rr.db, em, jobs, o.Payload) })
	}
	g.Go(func() error {
		defer close(jobs)
		return pace(gctx, o.Rate, n, jobs)
	})
	return g.Wait()
}

// relayLatency commits single-event transactions into the log at Rate per
// second for Duration (after a second of warm-up, not counted) while a
// relay with the default tick and batch publishes them to -publisher, and
// reports commit (the writer saw Commit return) → publish (the publisher
// acked it) latency.
func relayLatency(ctx context.Context, o Options) (Result, error) {
	warm := int(float64(o.Rate) * latencyWarmup.Seconds())
	total := warm + int(float64(o.Rate)*o.Duration.Seconds())
	rr, err := startRelayRun(ctx, o, total)
	if err != nil {
		return Result{}, err
	}
	defer rr.close(ctx)
	start := time.Now()
	if err := rr.generate(ctx, o, total); err != nil {
		return Result{}, err
	}
	held := time.Since(start)
	if err := rr.finish(ctx, total); err != nil {
		return Result{}, err
	}
	samples, early, err := rr.lr.latencies(warm, total)
	if err != nil {
		return Result{}, err
	}
	s := rr.r.Stats()
	res := throughput("commit-to-publish", total, held)
	res.setLatency(samples)
	res.Params = map[string]any{"rate": o.Rate, "duration_s": o.Duration.Seconds(), "publisher": cmpOr(o.Publisher, "noop"),
		"writers": latencyWriters, "batches": s.Batches, "ticks": s.Ticks, "errors": s.Errors}
	res.Note = fmt.Sprintf("events_per_s is the commit rate held (target %d/s); %d events published before their writer saw Commit return (counted as 0)", o.Rate, early)
	res.Verified = true
	return res, nil
}

// latencies are the commit → publish times of events from..to-1 (a
// publish stamped before the commit counts as 0, and is counted in early).
func (lr *latencyRun) latencies(from, to int) (samples []int64, early int, err error) {
	samples = make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		c, p := lr.committed[i].Load(), lr.started[i].Load()
		if c == 0 || p == 0 {
			return nil, 0, fmt.Errorf("event %d: committed %d, published %d", i, c, p)
		}
		if p < c {
			early++
		}
		samples = append(samples, max(0, p-c))
	}
	return samples, early, nil
}

// relayLongTx runs the generator at Rate for two periods of -hold: in the
// first nothing else happens; at the start of the second a transaction
// begins, emits one event into the log and stays open until the second
// ends. The figure is the rate at which the other events were published
// during the second period over the rate during the first (the first
// second of the run, warm-up, left out): a relay that a long transaction
// blocks (a reader bounded by the cluster's xmin) publishes nothing then.
// The held event must be published after its commit.
func relayLongTx(ctx context.Context, o Options) (Result, error) {
	perPeriod := int(float64(o.Rate) * o.Hold.Seconds())
	total := 2 * perPeriod
	held := total // the held transaction's event: the last slot
	rr, err := startRelayRun(ctx, o, total+1)
	if err != nil {
		return Result{}, err
	}
	defer rr.close(ctx)
	start := time.Now()
	holdStart, holdEnd := start.Add(o.Hold), start.Add(2*o.Hold)
	holder := make(chan error, 1)
	go func() { holder <- rr.holdOpen(ctx, o, holdStart, holdEnd, held) }()
	genErr := rr.generate(ctx, o, total)
	if err := <-holder; err != nil {
		return Result{}, fmt.Errorf("held transaction: %w", err)
	}
	if genErr != nil {
		return Result{}, genErr
	}
	if err := rr.finish(ctx, total+1); err != nil {
		return Result{}, err
	}
	return rr.longTxResult(o, start, holdStart, holdEnd, held, perPeriod)
}

// holdOpen waits until from, begins a transaction that emits event slot,
// holds it open until to and commits it, stamping the commit time.
func (rr *relayRun) holdOpen(ctx context.Context, o Options, from, to time.Time, slot int) error {
	em, err := logEmitter(o)
	if err != nil {
		return err
	}
	if err := sleepUntil(ctx, from); err != nil {
		return err
	}
	tx, err := rr.db.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ev := outbox.Event{Type: eventType, Payload: payload(o.Payload), Headers: map[string]string{"bench-seq": strconv.Itoa(slot)}}
	if _, err := em.Emit(ctx, tx, ev); err != nil {
		return err
	}
	if err := sleepUntil(ctx, to); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	rr.lr.committed[slot].Store(time.Now().UnixNano())
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
		return nil
	}
}

// longTxResult computes the rates of the two periods, the latencies of
// the other events committed while the transaction was open, and checks
// the held event.
func (rr *relayRun) longTxResult(o Options, start, holdStart, holdEnd time.Time, held, perPeriod int) (Result, error) {
	lr := rr.lr
	warmEnd := start.Add(min(latencyWarmup, o.Hold/2))
	before := lr.publishedIn(warmEnd, holdStart, held)
	during := lr.publishedIn(holdStart, holdEnd, held)
	rateBefore := float64(before) / holdStart.Sub(warmEnd).Seconds()
	rateDuring := float64(during) / holdEnd.Sub(holdStart).Seconds()
	samples, early, err := lr.latencies(perPeriod, 2*perPeriod)
	if err != nil {
		return Result{}, err
	}
	c, p := lr.committed[held].Load(), lr.started[held].Load()
	if c == 0 || p < c {
		return Result{}, fmt.Errorf("verify: the held event was published at %d, before its commit at %d", p, c)
	}
	res := throughput("longtx", during, holdEnd.Sub(holdStart))
	res.setLatency(samples)
	ratio := 0.0
	if rateBefore > 0 {
		ratio = round(rateDuring/rateBefore, 3)
	}
	res.Params = map[string]any{"rate": o.Rate, "hold_s": o.Hold.Seconds(), "publisher": cmpOr(o.Publisher, "noop"),
		"events_per_s_before": round(rateBefore, 0), "flow_ratio": ratio,
		"held_commit_to_publish_ms": round(float64(p-c)/1e6, 2), "held_begin_to_publish_ms": round(float64(p-holdStart.UnixNano())/1e6, 1)}
	res.Note = fmt.Sprintf("events_per_s is the rate at which the other events were published while one transaction stayed open for %s "+
		"(events_per_s_before: the same without it, after a warm-up); latencies are those of the events committed meanwhile; %d published before their writer saw Commit return",
		o.Hold, early)
	res.Verified = true
	return res, nil
}

// publishedIn counts the events (but skip) the publisher acked in [from, to).
func (lr *latencyRun) publishedIn(from, to time.Time, skip int) int {
	lo, hi := from.UnixNano(), to.UnixNano()
	n := 0
	for i := range lr.started {
		if p := lr.started[i].Load(); i != skip && p >= lo && p < hi {
			n++
		}
	}
	return n
}
