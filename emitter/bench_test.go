package emitter

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// benchEvents returns n typical events: JSON payload of about 100 bytes,
// aggregate fields and two headers.
func benchEvents(n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{
			Type:          "order.created",
			AggregateType: "order",
			AggregateID:   strconv.Itoa(i),
			ContentType:   outbox.ContentTypeJSON,
			Payload:       fmt.Appendf(nil, `{"order_id":%d,"customer":"c-123","total_cents":4999,"currency":"EUR"}`, i),
			Headers:       map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "source": "orders"},
		}
	}
	return events
}

// BenchmarkPrepare measures validation and encoding of 1,000 events, with
// no database.
func BenchmarkPrepare(b *testing.B) {
	e, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	events := benchEvents(1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.prepare(events); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmit measures Emit of 1 and 1,000 events, each call in its own
// committed transaction.
func BenchmarkEmit(b *testing.B) {
	db := testdb.NewMigrated(b)
	e, err := New(Config{Table: db.Table()})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 1000} {
		events := benchEvents(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchTx(b, db, true, func(tx pgx.Tx) error {
					_, err := e.Emit(context.Background(), tx, events...)
					return err
				})
			}
		})
	}
}

// BenchmarkEmitLog is BenchmarkEmit into a log (Kind outbox.KindLog):
// Emit of 1 and 1,000 events (INSERT) and of 5,000 (COPY), each call in
// its own committed transaction, beside the outbox's for comparison.
func BenchmarkEmitLog(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []outbox.TableKind{outbox.KindOutbox, outbox.KindLog} {
		db := testdb.New(b)
		if err := migrations.Migrate(ctx, db.Pool, migrations.Config{Table: db.Table(), Kind: kind}); err != nil {
			b.Fatal(err)
		}
		e, err := New(Config{Table: db.Table(), Kind: kind, DisableNotify: true})
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 1000, copyMinEvents} {
			events := benchEvents(n)
			b.Run(kind.String()+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					benchTx(b, db, true, func(tx pgx.Tx) error {
						_, err := e.Emit(ctx, tx, events...)
						return err
					})
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkInsertVsCopy compares the multi-row INSERT … unnest that Emit
// uses with pgx CopyFrom, both followed by the notify, for growing batches.
// Each call runs in a transaction that is rolled back, so the commit's WAL
// flush, equal for both, does not hide the difference.
func BenchmarkInsertVsCopy(b *testing.B) {
	db := testdb.NewMigrated(b)
	e, err := New(Config{Table: db.Table()})
	if err != nil {
		b.Fatal(err)
	}
	ways := []struct {
		name string
		run  func(context.Context, pgx.Tx, *columns, bool) error
	}{
		{"copy", e.sendCopy},
		{"insert", func(ctx context.Context, tx pgx.Tx, c *columns, notify bool) error {
			if c.idArgs == nil { // prepare fills the arrays only below the COPY threshold
				c.fill()
			}
			return e.send(ctx, tx, c, notify)
		}},
	}
	for _, n := range []int{10, 20, 50, 100, 1000, 10000} {
		events := benchEvents(n)
		for _, way := range ways {
			b.Run(fmt.Sprintf("%s/%d", way.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					cols, err := e.prepare(events)
					if err != nil {
						b.Fatal(err)
					}
					benchTx(b, db, false, func(tx pgx.Tx) error {
						return way.run(context.Background(), tx, cols, true)
					})
				}
			})
		}
	}
}

// BenchmarkInsertVsCopyPayload compares the INSERT and COPY for batches of
// few events with large payloads (1 MiB to 48 MiB in all, the events
// delayed), prepare included, each call in a transaction that is rolled
// back.
//
//	go test -run '^$' -bench InsertVsCopyPayload -benchtime=10x -benchmem ./emitter/
func BenchmarkInsertVsCopyPayload(b *testing.B) {
	db := testdb.NewMigrated(b)
	e, err := New(Config{Table: db.Table()})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []struct{ n, bytes int }{{10, 100 << 10}, {100, 10 << 10}, {500, 100 << 10}} {
		events := largeEvents(size.n, true)
		for i := range events {
			events[i].Payload = []byte(`{"p":"` + strings.Repeat("y", size.bytes) + `"}`)
		}
		for _, byCopy := range []bool{false, true} {
			b.Run(fmt.Sprintf("copy=%t/%dx%dKiB", byCopy, size.n, size.bytes>>10), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					benchTx(b, db, false, func(tx pgx.Tx) error {
						return sendBy(e, tx, events, byCopy)
					})
				}
			})
		}
	}
}

// sendBy prepares events and sends them by COPY or by the INSERT.
func sendBy(e *Emitter, tx pgx.Tx, events []outbox.Event, byCopy bool) error {
	c, err := e.prepare(events)
	if err != nil {
		return err
	}
	if byCopy {
		return e.sendCopy(context.Background(), tx, c, true)
	}
	if c.idArgs == nil {
		c.fill()
	}
	return e.send(context.Background(), tx, c, true)
}

// benchTx runs f in a transaction on db's pool, then commits or rolls back.
func benchTx(b *testing.B, db *testdb.DB, commit bool, f func(pgx.Tx) error) {
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := f(tx); err != nil {
		b.Fatal(err)
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// largeEvents returns n events of about 400 bytes each: a 300-byte JSON
// payload, aggregate fields, a partition key and three headers. With
// delayed set, event i is due i%60 seconds later (every tenth at once).
func largeEvents(n int, delayed bool) []outbox.Event {
	filler := strings.Repeat("x", 220)
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{
			Type:          "order.created",
			AggregateType: "order",
			AggregateID:   strconv.Itoa(i),
			PartitionKey:  "customer-" + strconv.Itoa(i%100),
			ContentType:   outbox.ContentTypeJSON,
			Payload:       fmt.Appendf(nil, `{"order_id":%d,"customer":"c-123","total_cents":4999,"note":"%s"}`, i, filler),
			Headers: map[string]string{"source": "orders", "tenant": "t-" + strconv.Itoa(i%7),
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		}
		if delayed && i%10 != 0 {
			events[i].Delay = time.Duration(i%60) * time.Second
		}
	}
	return events
}

// BenchmarkEmitLarge measures the memory of one Emit of 1,000, 10,000 and
// 100,000 events, without and with delays, each call in a transaction that
// is rolled back. Besides -benchmem's figures it reports peak-heap-MB: the
// peak of the Go heap (live and not yet collected) above its level before
// the call, sampled every millisecond; the events themselves are built
// before and not counted.
//
//	go test -run '^$' -bench EmitLarge -benchtime=3x -benchmem ./emitter/
func BenchmarkEmitLarge(b *testing.B) {
	db := testdb.NewMigrated(b)
	e, err := New(Config{Table: db.Table()})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 10000, 100000} {
		for _, delayed := range []bool{false, true} {
			events := largeEvents(n, delayed)
			name := fmt.Sprintf("%d/delay=%t", n, delayed)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var peak uint64
				for b.Loop() {
					peak = max(peak, heapPeak(func() {
						benchTx(b, db, false, func(tx pgx.Tx) error {
							_, err := e.Emit(context.Background(), tx, events...)
							return err
						})
					}))
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			})
		}
	}
}

// heapPeak runs f and returns the peak of the heap's object bytes above
// their level before f, sampled every millisecond while f runs.
func heapPeak(f func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: sample[0].Name}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				metrics.Read(s)
				if v := s[0].Value.Uint64(); v > base && v-base > peak.Load() {
					peak.Store(v - base)
				}
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	return peak.Load()
}

// minimalBenchDDL is the benchmarks' minimal outbox (benchmarks/minimal.go)
// and the business table both sides write a row into.
const minimalBenchDDL = `CREATE TABLE orders (id bigserial PRIMARY KEY, amount int NOT NULL, note text);
CREATE TABLE minimal_outbox (id bigserial PRIMARY KEY, type text NOT NULL, payload bytea,
	status text NOT NULL DEFAULT 'PENDING', next_attempt_at timestamptz NOT NULL DEFAULT now(),
	lock_token uuid, lease_until timestamptz);
CREATE INDEX minimal_outbox_due ON minimal_outbox (next_attempt_at, id) WHERE status = 'PENDING'`

// BenchmarkEmitVsMinimal interleaves, transaction by transaction, the
// benchmarks' log emit case (a business row and Emit of one event into a
// log), the same Emit forced through the unnest INSERT (the path one
// event took before it had its VALUES row), and the minimal outbox's
// plain INSERT, at 1 and 4 writers, each transaction committed. On a
// loaded machine the interleaving lets the sides share the noise; it
// reports each side's µs per transaction and emit/minimal, the emit
// case's throughput as a fraction of the minimal's.
//
//	go test -run '^$' -bench EmitVsMinimal -benchtime=3000x ./emitter/
func BenchmarkEmitVsMinimal(b *testing.B) {
	ctx := context.Background()
	db := testdb.New(b)
	if err := migrations.Migrate(ctx, db.Pool, migrations.Config{Table: db.Table(), Kind: outbox.KindLog}); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, minimalBenchDDL); err != nil {
		b.Fatal(err)
	}
	e, err := New(Config{Table: db.Table(), Kind: outbox.KindLog})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"order_id":42,"customer":"c-123","total_cents":4999,"currency":"EUR","note":"0123456789abcdef"}`)
	ev := outbox.Event{Type: "order.created", AggregateType: "order", Payload: body}
	sides := []func(pgx.Tx) error{
		func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO minimal_outbox (type, payload) VALUES ($1, $2)`, "order.created", body)
			return err
		},
		func(tx pgx.Tx) error { _, err := e.Emit(ctx, tx, ev); return err },
		func(tx pgx.Tx) error { return emitByUnnest(ctx, e, tx, ev) },
	}
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			spent := make([]atomic.Int64, len(sides))
			var wg sync.WaitGroup
			var next atomic.Int64
			for range writers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						for k := range sides {
							side := (int(i) + k) % len(sides) // rotate the order
							spent[side].Add(int64(timedBusinessTx(b, db, sides[side])))
						}
					}
				})
			}
			wg.Wait()
			us := func(side int) float64 { return float64(spent[side].Load()) / float64(b.N) / 1e3 }
			b.ReportMetric(us(0), "minimal-µs/tx")
			b.ReportMetric(us(1), "emit-µs/tx")
			b.ReportMetric(us(2), "unnest-µs/tx")
			b.ReportMetric(us(0)/us(1), "emit/minimal")
			b.ReportMetric(us(0)/us(2), "unnest/minimal")
		})
	}
}

// emitByUnnest is Emit of one event into a log through the arrays'
// INSERT, as every call went before one event had its VALUES row.
func emitByUnnest(ctx context.Context, e *Emitter, tx pgx.Tx, ev outbox.Event) error {
	c, err := e.prepare([]outbox.Event{ev})
	if err != nil {
		return err
	}
	c.fill()
	return e.exec(ctx, tx, c, false, e.insertSQL, c.arrayArgs(true))
}

// timedBusinessTx runs a business row and f in one committed transaction
// on db's pool and returns how long it took, begin to commit.
func timedBusinessTx(b *testing.B, db *testdb.DB, f func(pgx.Tx) error) time.Duration {
	ctx := context.Background()
	start := time.Now()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
			return err
		}
		return f(tx)
	})
	if err != nil {
		b.Error(err)
	}
	return time.Since(start)
}
