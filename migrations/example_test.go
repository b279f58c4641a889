package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Migrate at start, through the pool the service already holds: it
// acquires one connection for the call. It is idempotent and safe when
// every replica runs it at once.
func ExampleMigrate() {
	ctx := context.Background()
	pool, table, done := exampleDB() // the application's pool and outbox table
	defer done()

	cfg := migrations.Config{Table: table}
	if err := migrations.Migrate(ctx, pool, cfg); err != nil {
		panic(err)
	}
	if err := migrations.Migrate(ctx, pool, cfg); err != nil { // nothing left to do
		panic(err)
	}
	v, err := migrations.Version(ctx, pool, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("at the latest version:", v == migrations.Latest())
	// Output:
	// at the latest version: true
}

// Verify at start, where the service's role may not change the schema
// (someone else migrates): it only reads the catalogs, and names every
// object that is missing or different.
func ExampleVerify() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	cfg := migrations.Config{Table: table}

	err := migrations.Verify(ctx, pool, cfg)
	var mismatch *migrations.VerifyError
	if errors.As(err, &mismatch) {
		fmt.Println("schema mismatch; table missing:", errors.Is(err, outbox.ErrMissingTable))
		// A service would stop here: log.Fatal(err) lists every problem.
	}

	if err := migrations.Migrate(ctx, pool, cfg); err != nil {
		panic(err)
	}
	fmt.Println("after Migrate:", migrations.Verify(ctx, pool, cfg))
	// Output:
	// schema mismatch; table missing: true
	// after Migrate: <nil>
}

// Render gives plain up and down SQL files for goose, golang-migrate or
// atlas, every name filled in and quoted. Each up file records its version
// in the table Migrate keeps, so Verify works whichever tool applied it.
// Render touches no database.
func ExampleRender() {
	files, err := migrations.Render(migrations.Config{Table: outbox.Table{Schema: "billing", Name: "invoice_events"}})
	if err != nil {
		panic(err)
	}
	names, err := fs.Glob(files, "001_*")
	if err != nil {
		panic(err)
	}
	fmt.Println(names)

	up, err := fs.ReadFile(files, names[1])
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(up)) {
		if strings.HasPrefix(line, "CREATE TABLE") {
			fmt.Print(line)
		}
	}
	// Output:
	// [001_create_outbox.down.sql 001_create_outbox.up.sql]
	// CREATE TABLE "billing"."invoice_events" (
	// CREATE TABLE IF NOT EXISTS "billing"."invoice_events_schema_version" (version int4 NOT NULL);
}
