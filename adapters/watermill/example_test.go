package pgwatermill_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
)

// A service publishes a message in its business transaction, and a
// consumer receives it through a Subscriber once the transaction
// committed. The message of a rolled-back transaction never appears.
func Example() {
	db := exampleDB() // a pool, and an outbox migrated into a schema of its own
	defer db.drop()
	ctx := context.Background() // the program's context; go test's -timeout bounds this example

	// A nil pool: every Publish must run in a business transaction.
	pub, err := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{Emitter: emitter.Config{Table: db.Table}})
	if err != nil {
		panic(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		// ... the business writes in tx ...
		msg := message.NewMessage("2f9c2a5e-5b7e-4d2a-9a55-0c1f4b0e8d31", []byte(`{"total_cents":4200}`))
		msg.Metadata.Set(pgwatermill.MetadataAggregateID, "o-1")
		msg.Metadata.Set("tenant", "acme")
		msg.SetContext(pgwatermill.WithTx(ctx, tx))
		if err := pub.Publish("order.created", msg); err != nil {
			panic(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx) // the message vanishes with the transaction
		}
		if err != nil {
			panic(err)
		}
	}

	sub, err := pgwatermill.NewSubscriber(db.Pool, pgwatermill.SubscriberConfig{
		Dispatcher: dispatcher.Config{Table: db.Table, Logger: quietLogger},
	})
	if err != nil {
		panic(err)
	}
	msgs, err := sub.Subscribe(ctx, "order.created")
	if err != nil {
		panic(err)
	}
	msg := <-msgs
	fmt.Println(msg.UUID, string(msg.Payload))
	fmt.Println("aggregate:", msg.Metadata.Get(pgwatermill.MetadataAggregateID), "tenant:", msg.Metadata.Get("tenant"))
	msg.Ack() // the event is SENT
	if err := sub.Close(); err != nil {
		panic(err)
	}
	_, open := <-msgs
	fmt.Println("channel open after Close:", open)
	// Output:
	// 2f9c2a5e-5b7e-4d2a-9a55-0c1f4b0e8d31 {"total_cents":4200}
	// aggregate: o-1 tenant: acme
	// channel open after Close: false
}

// exampleTestDB is an example's database.
type exampleTestDB struct {
	testDB
	drop func()
}

// exampleDB migrates an outbox into a schema of its own; drop removes it.
// Examples cannot skip: without a database they fail.
func exampleDB() exampleTestDB {
	if sharedPool == nil {
		panic(skipReason)
	}
	ctx := context.Background()
	schema := fmt.Sprintf("pgwatermill_example_%d", schemaSeq.Add(1))
	db := testDB{Pool: sharedPool, Table: exampleTable(schema)}
	if err := migrateTable(ctx, db.Table, false); err != nil {
		panic(err)
	}
	return exampleTestDB{testDB: db, drop: func() {
		_, _ = sharedPool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}}
}
