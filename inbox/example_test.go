package inbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A consumer that invoices each order once, however often its event is
// delivered: the inbox record and the invoice commit together, and a
// redelivery finds the record and skips the work. The broker message is
// acknowledged after the commit, and on a duplicate too.
func ExampleInbox_Process() {
	ctx := context.Background()
	pool, schema, done := exampleDB() // the consumer's pool and schema
	defer done()

	cfg := inbox.Config{Table: outbox.Table{Schema: schema}} // <schema>.outbox_inbox
	if err := inbox.Migrate(ctx, pool, cfg); err != nil {
		panic(err)
	}
	ib, err := inbox.New(cfg)
	if err != nil {
		panic(err)
	}

	// handle is the consumer's message handler, given the event decoded
	// from the broker (kafkapub.Decode, natspub.DecodeJetStream).
	handle := func(e outbox.Event) (inbox.Result, error) {
		var res inbox.Result
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = ib.Process(ctx, tx, "billing", e, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, e.AggregateID)
				return err
			})
			return err
		})
		return res, err
	}

	e := outbox.Event{
		ID:   uuid.MustParse("01938a4e-7c00-7000-8000-000000000001"),
		Type: "order.created", AggregateID: "o-1", Payload: []byte(`{"total_cents":4200}`),
	}
	for range 2 { // a delivery and its redelivery
		res, err := handle(e)
		fmt.Println("duplicate:", res.Duplicate, "error:", err)
	}

	e.Payload = []byte(`{"total_cents":1}`) // the same ID with other content
	_, err = handle(e)
	fmt.Println("content mismatch:", errors.Is(err, inbox.ErrContentMismatch))

	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
		panic(err)
	}
	fmt.Println("invoices:", invoices)
	// Output:
	// duplicate: false error: <nil>
	// duplicate: true error: <nil>
	// content mismatch: true
	// invoices: 1
}
