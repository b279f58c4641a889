package emitter

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
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
		{"insert", e.send},
	}
	for _, n := range []int{10, 100, 1000, 10000} {
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
