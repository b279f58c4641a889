package errtext_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every error the library returns begins with exactly one "pgoutbox: ",
// and says it nowhere else, however many of the library's errors it
// wraps: representative errors of every package, from bad input to a
// missing table, each taken from a real call against PostgreSQL.
func TestOnePrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	empty := testdb.New(t) // no outbox table
	bad := outbox.Table{Schema: "Bad"}
	errs := map[string]error{}

	errs["identifier"] = bad.Validate()
	errs["dispatcher config"] = errOf(dispatcher.New(db.Pool, dispatcher.Config{Table: bad}))
	errs["dispatcher batch"] = errOf(dispatcher.New(db.Pool, dispatcher.Config{Table: db.Table(), BatchSize: -1}))
	errs["emitter config"] = errOf(emitter.New(emitter.Config{Table: bad}))
	errs["admin config"] = errOf(admin.New(db.Pool, admin.Config{Table: bad}))
	errs["inbox config"] = errOf(inbox.New(inbox.Config{Table: bad}))
	errs["migrate config"] = migrations.Migrate(ctx, db.Pool, migrations.Config{Table: bad})
	errs["verify missing table"] = migrations.Verify(ctx, empty.Pool, migrations.Config{Table: empty.Table()})
	errs["inbox verify missing table"] = inbox.Verify(ctx, empty.Pool, inbox.Config{Table: empty.Table()})

	em, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	emEmpty, err := emitter.New(emitter.Config{Table: empty.Table()})
	require.NoError(t, err)
	errs["emit nil tx"] = errOf(em.Emit(ctx, nil, outbox.Event{Type: "x", Payload: []byte("{}")}))
	errs["emit invalid event, nil tx"] = errOf(em.Emit(ctx, nil, outbox.Event{Payload: []byte("{}")}))
	inTx(t, db, func(tx pgx.Tx) {
		errs["emit invalid event"] = errOf(em.Emit(ctx, tx, outbox.Event{Payload: []byte("{}")}))
		done, cancel := context.WithCancel(ctx)
		cancel()
		errs["emit ctx done"] = errOf(em.Emit(done, tx, outbox.Event{Type: "x", Payload: []byte("{}")}))
	})
	inTx(t, empty, func(tx pgx.Tx) {
		errs["emit missing table"] = errOf(emEmpty.Emit(ctx, tx, outbox.Event{Type: "x", Payload: []byte("{}")}))
	})
	id := uuid.New()
	inTx(t, db, func(tx pgx.Tx) {
		_, err := em.Emit(ctx, tx, outbox.Event{ID: id, Type: "x", Payload: []byte("{}")})
		require.NoError(t, err)
	}, commit)
	inTx(t, db, func(tx pgx.Tx) {
		errs["emit duplicate id"] = errOf(em.Emit(ctx, tx, outbox.Event{ID: id, Type: "x", Payload: []byte("{}")}))
		errs["emit aborted tx"] = errOf(em.Emit(ctx, tx, outbox.Event{Type: "x", Payload: []byte("{}")}))
	})

	ib, err := inbox.New(inbox.Config{Table: db.Table()})
	require.NoError(t, err)
	errs["inbox nil tx"] = errOf(ib.Record(ctx, nil, "c", outbox.Event{ID: id, Type: "x"}))
	ibEmpty, err := inbox.New(inbox.Config{Table: empty.Table()})
	require.NoError(t, err)
	inTx(t, empty, func(tx pgx.Tx) {
		errs["inbox missing table"] = errOf(ibEmpty.Record(ctx, tx, "c", outbox.Event{ID: id, Type: "x"}))
	})
	inTx(t, db, func(tx pgx.Tx) {
		errs["inbox bad consumer"] = errOf(ib.Record(ctx, tx, "", outbox.Event{ID: id, Type: "x"}))
	})

	ad, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	adEmpty, err := admin.New(empty.Pool, admin.Config{Table: empty.Table()})
	require.NoError(t, err)
	errs["admin not found"] = errOf(ad.Inspect(ctx, uuid.New()))
	errs["admin bad limit"] = errOf(ad.List(ctx, admin.ListParams{Limit: -1}))
	errs["admin missing table"] = errOf(adEmpty.Counts(ctx))

	d, err := dispatcher.New(empty.Pool, dispatcher.Config{Table: empty.Table()})
	require.NoError(t, err)
	errs["dispatcher missing table"] = d.Run(ctx)
	errs["dispatcher handle"] = d.Handle("", nil)

	var wrong []string
	for name, err := range errs {
		require.Error(t, err, name)
		text := err.Error()
		if !strings.HasPrefix(text, errtext.Prefix) || strings.Count(text, "pgoutbox:") != 1 {
			wrong = append(wrong, name+": "+text)
		}
	}
	require.Empty(t, wrong, "errors without exactly one pgoutbox: prefix")
}

func commit(t *testing.T, tx pgx.Tx) { require.NoError(t, tx.Commit(context.Background())) }

// inTx runs f in a transaction of db, rolled back after it unless end says
// otherwise.
func inTx(t *testing.T, db *testdb.DB, f func(pgx.Tx), end ...func(*testing.T, pgx.Tx)) {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	f(tx)
	for _, e := range end {
		e(t, tx)
	}
}

// errOf returns the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }
