package pgwatermill_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	pgwatermill "github.com/pgoutbox/pgoutbox/adapters/watermill"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func newPublisher(t *testing.T, db testDB, cfg pgwatermill.PublisherConfig) *pgwatermill.Publisher {
	t.Helper()
	cfg.Emitter.Table = db.Table
	pub, err := pgwatermill.NewPublisher(db.Pool, cfg)
	require.NoError(t, err)
	return pub
}

// begin starts a transaction rolled back at cleanup unless it ended,
// so that a failed test leaves no lock for the schema's drop to wait on.
func begin(t *testing.T, db testDB) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(runContext(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// inTx returns a message whose context carries tx.
func inTx(ctx context.Context, tx pgx.Tx, id string) *message.Message {
	msg := message.NewMessage(id, []byte(`{"n":1}`))
	msg.SetContext(pgwatermill.WithTx(ctx, tx))
	return msg
}

func TestPublishInCallersTx(t *testing.T) {
	t.Parallel()

	t.Run("CommitShowsRollbackHides", func(t *testing.T) {
		t.Parallel()
		db := newDB(t, false)
		ctx := runContext(t)
		pub, err := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{Emitter: emitterConfig(db)})
		require.NoError(t, err)

		kept, dropped := watermill.NewUUID(), watermill.NewUUID()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return pub.Publish("order.created", inTx(ctx, tx, kept))
		}))
		tx := begin(t, db)
		require.NoError(t, pub.Publish("order.created", inTx(ctx, tx, dropped)))
		require.Len(t, rows(t, db), 1, "uncommitted events are not visible")
		require.NoError(t, tx.Rollback(ctx))
		got := rows(t, db)
		require.Len(t, got, 1)
		require.Contains(t, got, uuid.MustParse(kept))
	})

	t.Run("TxWinsOverPool", func(t *testing.T) {
		t.Parallel()
		db := newDB(t, false)
		ctx := runContext(t)
		other, err := pgxpool.New(ctx, databaseURL) // the Publisher's pool is not the tx's
		require.NoError(t, err)
		t.Cleanup(other.Close)
		pub, err := pgwatermill.NewPublisher(other, pgwatermill.PublisherConfig{Emitter: emitterConfig(db)})
		require.NoError(t, err)
		tx := begin(t, db)
		require.NoError(t, pub.Publish("t", inTx(ctx, tx, watermill.NewUUID())))
		require.NoError(t, tx.Rollback(ctx))
		require.Empty(t, rows(t, db), "written in the message's tx, gone with it")
	})

	t.Run("MixedTxRefused", func(t *testing.T) {
		t.Parallel()
		db := newDB(t, false)
		ctx := runContext(t)
		pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
		tx, other := begin(t, db), begin(t, db)
		plain := message.NewMessage(watermill.NewUUID(), []byte("x")) // joins the one tx there is
		err := pub.Publish("t", plain, inTx(ctx, tx, watermill.NewUUID()), inTx(ctx, other, watermill.NewUUID()))
		require.ErrorIs(t, err, pgwatermill.ErrMixedTx)
		require.Empty(t, rows(t, db))
	})

	t.Run("NoTxWithoutPool", func(t *testing.T) {
		t.Parallel()
		pub, err := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{})
		require.NoError(t, err)
		err = pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x")))
		require.ErrorIs(t, err, pgwatermill.ErrNoTx)
	})

	t.Run("TxPublisher", func(t *testing.T) {
		t.Parallel()
		db := newDB(t, false)
		ctx := runContext(t)
		tx := begin(t, db)
		pub, err := pgwatermill.NewTxPublisher(tx, pgwatermill.PublisherConfig{Emitter: emitterConfig(db)})
		require.NoError(t, err)
		require.NoError(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("a")),
			message.NewMessage(watermill.NewUUID(), []byte("b"))))
		require.NoError(t, tx.Commit(ctx))
		require.Len(t, rows(t, db), 2)
		err = pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("late")))
		require.ErrorIs(t, err, outbox.ErrTxDone, "after the commit")
		require.Len(t, rows(t, db), 2)

		_, err = pgwatermill.NewTxPublisher(nil, pgwatermill.PublisherConfig{})
		require.ErrorIs(t, err, outbox.ErrInvalidInput)
	})

	t.Run("OwnTxWithPool", func(t *testing.T) {
		t.Parallel()
		db := newDB(t, false)
		pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
		require.NoError(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x"))))
		require.Len(t, rows(t, db), 1)
		require.NoError(t, pub.Close())
		require.NoError(t, pub.Close())
		require.ErrorIs(t, pub.Publish("t", message.NewMessage(watermill.NewUUID(), []byte("x"))), pgwatermill.ErrClosed)
	})
}

func TestPublishRefusesBadMetadataAtomically(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})

	cases := map[string]message.Metadata{
		"KeyNotAToken":      {"bad key": "v"},
		"ReservedPrefix":    {"ce-type": "v"},
		"ValueWithNewline":  {"note": "line\nbreak"},
		"BadPartitionKey":   {pgwatermill.MetadataPartitionKey: " padded"},
		"NonUTF8ContentTyp": {pgwatermill.MetadataContentType: "\xff"},
	}
	for name, meta := range cases {
		good := message.NewMessage(watermill.NewUUID(), []byte("ok"))
		bad := message.NewMessage(watermill.NewUUID(), []byte("secret-payload"))
		bad.Metadata = meta
		err := pub.Publish("t", good, bad)
		var verr *outbox.ValidationError
		require.ErrorAs(t, err, &verr, name)
		require.Equal(t, 1, verr.Index, name)
		require.ErrorIs(t, err, outbox.ErrInvalidEvent, name)
		require.NotContains(t, err.Error(), "secret-payload", name)
		for _, v := range meta {
			if len(v) > 2 {
				require.NotContains(t, err.Error(), v, name)
			}
		}
	}

	// In the caller's transaction: refused before any SQL, so the
	// transaction is still usable.
	tx := begin(t, db)
	bad := inTx(ctx, tx, watermill.NewUUID())
	bad.Metadata = message.Metadata{"bad key": "v"}
	require.ErrorIs(t, pub.Publish("t", inTx(ctx, tx, watermill.NewUUID()), bad), outbox.ErrInvalidEvent)
	require.NoError(t, pub.Publish("t", inTx(ctx, tx, watermill.NewUUID())))
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, rows(t, db), 1, "only the last, valid call wrote")
}

func TestPublishSameUUIDTwice(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))

	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	require.NoError(t, pub.Publish("t", msg))
	require.ErrorIs(t, pub.Publish("t", msg), outbox.ErrDuplicateID, "the event ID is the UUID")

	fresh := newPublisher(t, db, pgwatermill.PublisherConfig{NewEventIDs: true})
	require.NoError(t, fresh.Publish("t", msg))
	require.NoError(t, fresh.Publish("t", msg))
	require.Len(t, rows(t, db), 3)
}

func TestEventID(t *testing.T) {
	t.Parallel()
	canonical := watermill.NewUUID()
	id, carry := pgwatermill.EventID(canonical)
	require.Equal(t, canonical, id.String())
	require.False(t, carry)

	for _, s := range []string{watermill.NewULID(), "order-42", strings.ToUpper(canonical), "{" + canonical + "}"} {
		id, carry := pgwatermill.EventID(s)
		require.True(t, carry, s)
		again, _ := pgwatermill.EventID(s)
		require.Equal(t, id, again, "deterministic")
		require.Equal(t, uuid.Version(5), id.Version())
	}
	id, carry = pgwatermill.EventID("")
	require.Equal(t, uuid.Nil, id)
	require.False(t, carry)
}

// valueTx is a pgx.Tx wrapper used by value whose type cannot be compared
// with ==, as a caller's instrumented transaction may be.
type valueTx struct {
	pgx.Tx
	labels map[string]string
}

// Messages carrying a transaction whose type is not comparable are
// compared by connection: the same transaction joins, two transactions
// give ErrMixedTx, and neither panics.
func TestPublishTxNotComparable(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	tx, other := begin(t, db), begin(t, db)
	wrap := func(tx pgx.Tx) pgx.Tx { return valueTx{Tx: tx, labels: map[string]string{}} }

	err := pub.Publish("t", inTx(ctx, wrap(tx), watermill.NewUUID()), inTx(ctx, wrap(other), watermill.NewUUID()))
	require.ErrorIs(t, err, pgwatermill.ErrMixedTx)
	require.NoError(t, pub.Publish("t", inTx(ctx, wrap(tx), watermill.NewUUID()), inTx(ctx, wrap(tx), watermill.NewUUID())))
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, rows(t, db), 2)
}

// A message whose event is already in the outbox, published in the
// caller's transaction, gives outbox.ErrDuplicateID and aborts that
// transaction (as the docs say); published through a savepoint
// (NewTxPublisher on tx.Begin) it costs only the savepoint. A UUID
// repeated within one call is refused before any SQL.
func TestPublishDuplicateInCallersTx(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{})
	dup := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.NoError(t, pub.Publish("t", dup))

	tx := begin(t, db)
	err := pub.Publish("t", inTx(ctx, tx, watermill.NewUUID()), inTx(ctx, tx, dup.UUID), inTx(ctx, tx, dup.UUID))
	var verr *outbox.ValidationError
	require.ErrorAs(t, err, &verr, "a repeat within the call is refused before any SQL")
	require.Equal(t, 2, verr.Index)

	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	spPub, err := pgwatermill.NewTxPublisher(sp, pgwatermill.PublisherConfig{Emitter: emitterConfig(db)})
	require.NoError(t, err)
	require.ErrorIs(t, spPub.Publish("t", message.NewMessage(dup.UUID, []byte("x"))), outbox.ErrDuplicateID)
	require.NoError(t, sp.Rollback(ctx))
	kept := watermill.NewUUID()
	require.NoError(t, pub.Publish("t", inTx(ctx, tx, kept)), "the savepoint kept tx usable")

	require.ErrorIs(t, pub.Publish("t", inTx(ctx, tx, dup.UUID)), outbox.ErrDuplicateID)
	require.ErrorIs(t, pub.Publish("t", inTx(ctx, tx, watermill.NewUUID())), outbox.ErrTxDone, "without a savepoint tx is aborted")
	require.NoError(t, tx.Rollback(ctx))
	require.Len(t, rows(t, db), 1)
}

// A message that sets MetadataPartitionKey, even to "", is not given a
// key by OrderKeyFunc: the metadata wins, as documented.
func TestPartitionKeyMetadataWinsOverOrderKeyFunc(t *testing.T) {
	t.Parallel()
	db := newDB(t, false)
	ctx := runContext(t)
	pub := newPublisher(t, db, pgwatermill.PublisherConfig{
		OrderKeyFunc: func(pgwatermill.OrderKeyParams) string { return "from-func" },
	})
	none, empty, set := message.NewMessage(watermill.NewUUID(), []byte("x")),
		message.NewMessage(watermill.NewUUID(), []byte("x")), message.NewMessage(watermill.NewUUID(), []byte("x"))
	empty.Metadata.Set(pgwatermill.MetadataPartitionKey, "")
	set.Metadata.Set(pgwatermill.MetadataPartitionKey, "from-metadata")
	require.NoError(t, pub.Publish("t", none, empty, set))
	for msg, want := range map[*message.Message]string{none: "from-func", empty: "", set: "from-metadata"} {
		var key *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT partition_key FROM `+db.Table.String()+` WHERE id = $1`,
			uuid.MustParse(msg.UUID)).Scan(&key))
		require.Equal(t, want, deref(key), msg.UUID)
	}
}

// deref returns *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
