package emitter_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Markers put in payloads and header values; error texts must never hold
// them.
const (
	payloadMarker = "SECRET-PAYLOAD-MARKER"
	headerMarker  = "SECRET-HEADER-MARKER"
)

// testBundle is one test's database and an emitter writing into it.
type testBundle struct {
	db      *testdb.DB
	emitter *emitter.Emitter
}

// setup migrates a fresh schema, creates a business table in it and returns
// an emitter on its outbox table. cfg.Table is overwritten.
func setup(t *testing.T, cfg emitter.Config) *testBundle {
	t.Helper()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE business (name text PRIMARY KEY)`)
	require.NoError(t, err)
	return &testBundle{db: db, emitter: newEmitter(t, db, cfg)}
}

// setupKind is setup for a table of kind: a log (outbox.KindLog) is
// migrated as one, under the same name (outbox_events), so that the
// helpers that read the outbox table read the log.
func setupKind(t *testing.T, kind outbox.TableKind, cfg emitter.Config) *testBundle {
	t.Helper()
	if kind == outbox.KindOutbox {
		return setup(t, cfg)
	}
	ctx := context.Background()
	db := testdb.New(t)
	require.NoError(t, migrations.Migrate(ctx, db.Pool, migrations.Config{Table: db.Table(), Kind: kind}))
	_, err := db.Pool.Exec(ctx, `CREATE TABLE business (name text PRIMARY KEY)`)
	require.NoError(t, err)
	cfg.Kind = kind
	return &testBundle{db: db, emitter: newEmitter(t, db, cfg)}
}

// forEachKind runs f as a parallel subtest per table kind.
func forEachKind(t *testing.T, f func(t *testing.T, kind outbox.TableKind)) {
	for _, kind := range []outbox.TableKind{outbox.KindOutbox, outbox.KindLog} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// newEmitter returns an emitter on db's outbox table.
func newEmitter(t *testing.T, db *testdb.DB, cfg emitter.Config) *emitter.Emitter {
	t.Helper()
	cfg.Table = db.Table()
	e, err := emitter.New(cfg)
	require.NoError(t, err)
	return e
}

// validEvent returns an event that passes validation, holding both markers.
func validEvent() outbox.Event {
	return outbox.Event{
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   "42",
		ContentType:   outbox.ContentTypeJSON,
		Payload:       []byte(`{"note":"` + payloadMarker + `"}`),
		Headers:       map[string]string{"trace": headerMarker},
	}
}

// begin starts a transaction on the bundle's pool and rolls it back at the
// end of the test if it is still open.
func (b *testBundle) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.db.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// insertBusiness writes a business row in tx.
func insertBusiness(t *testing.T, tx pgx.Tx, name string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), `INSERT INTO business (name) VALUES ($1)`, name)
	require.NoError(t, err)
}

// outboxCount counts the rows of the bundle's outbox table, optionally
// restricted by a WHERE clause over its columns.
func (b *testBundle) outboxCount(t *testing.T, where string, args ...any) int {
	t.Helper()
	sql := `SELECT count(*) FROM ` + pgx.Identifier{b.db.Schema, outbox.DefaultTable}.Sanitize()
	if where != "" {
		sql += ` WHERE ` + where
	}
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// businessCount counts the business rows with the given name.
func (b *testBundle) businessCount(t *testing.T, name string) int {
	t.Helper()
	var n int
	err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM business WHERE name = $1`, name).Scan(&n)
	require.NoError(t, err)
	return n
}
