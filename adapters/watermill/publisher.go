package pgwatermill

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// txKey is the context key of the transaction WithTx stores.
type txKey struct{}

// WithTx returns a copy of ctx that carries tx. Set it as a message's
// context (msg.SetContext) and Publish writes that message's events in tx:
// they become visible when tx commits and vanish if it rolls back.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the transaction WithTx stored in ctx, or nil.
func TxFromContext(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// Publisher is a Watermill message.Publisher that writes messages into the
// pgoutbox outbox table as events, all messages of one Publish call in one
// Emit. It is safe for concurrent use.
type Publisher struct {
	em     *emitter.Emitter
	pool   *pgxpool.Pool // own transactions; nil for none
	tx     pgx.Tx        // NewTxPublisher's transaction, or nil
	cfg    PublisherConfig
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that writes each Publish call in the
// transaction its messages' contexts carry ([WithTx]; see Publish) and,
// when none carries one, in a transaction of its own on pool, committed
// before Publish returns. With a nil pool such a call returns [ErrNoTx]
// instead: pass nil to make sure no event is ever written outside a
// business transaction. A message's transaction may come from any pool
// or connection (its events go to that transaction's database, into
// cfg.Emitter's table); pool serves only the calls without one. An
// invalid cfg gives an *outbox.ConfigError.
func NewPublisher(pool *pgxpool.Pool, cfg PublisherConfig) (*Publisher, error) {
	return newPublisher(pool, nil, cfg)
}

// NewTxPublisher returns a Publisher that writes every Publish call in tx,
// whatever the messages' contexts carry; like watermill-sql's publisher
// over a transaction, make one per transaction. It never commits or rolls
// back tx; a Publish after tx ended gives an error matching
// outbox.ErrTxDone and writes nothing. A nil tx gives an *outbox.InputError naming "tx", an invalid
// cfg an *outbox.ConfigError.
func NewTxPublisher(tx pgx.Tx, cfg PublisherConfig) (*Publisher, error) {
	if tx == nil {
		return nil, &outbox.InputError{Field: "tx", Reason: "is nil", Err: outbox.ErrTxDone}
	}
	return newPublisher(nil, tx, cfg)
}

func newPublisher(pool *pgxpool.Pool, tx pgx.Tx, cfg PublisherConfig) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	em, err := emitter.New(cfg.Emitter)
	if err != nil {
		return nil, err
	}
	return &Publisher{em: em, pool: pool, tx: tx, cfg: cfg}, nil
}

// Publish writes msgs as events of type topic, in one Emit: all are
// written or none. It chooses the transaction so: NewTxPublisher's; else
// the one the messages' contexts carry ([WithTx]; messages that carry
// none join it, two different ones give [ErrMixedTx]); else, with a pool,
// its own, committed before it returns; else it returns [ErrNoTx].
//
// A nil message, or one whose metadata breaks the outbox's header rule (a
// key that is not a header name, a value with CR or LF, ...; see package
// outbox), gives an *outbox.ValidationError whose Index is the message's
// position and whose text never quotes a value; so does any event Emit
// refuses (an empty topic, a payload over the limit, a UUID repeated
// within the call). Nothing is written then, and the caller's
// transaction is still usable. Other errors come from the database: in
// the caller's transaction they leave it aborted. Among them, a message
// whose event ID is already in the outbox table (the same UUID published
// again, without PublisherConfig.NewEventIDs) gives an error matching
// outbox.ErrDuplicateID; no check before the insert could tell without
// racing a concurrent one. Where that may happen and the transaction
// must survive it, publish through a savepoint: sp, _ := tx.Begin(ctx),
// NewTxPublisher(sp, cfg), and sp.Rollback(ctx) on error (each savepoint
// is a subtransaction; PostgreSQL slows down past 64 in one
// transaction). A closed Publisher returns [ErrClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	events, err := p.events(topic, msgs)
	if err != nil {
		return err
	}
	tx, err := p.txOf(msgs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(msgs[0].Context()), p.cfg.PublishTimeout)
	defer cancel()
	if tx != nil {
		return p.emit(ctx, tx, topic, events)
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return p.emit(ctx, tx, topic, events) })
}

// events maps msgs to events and checks them against the header rule.
func (p *Publisher) events(topic string, msgs []*message.Message) ([]outbox.Event, error) {
	events := make([]outbox.Event, len(msgs))
	for i, msg := range msgs {
		if msg == nil {
			return nil, &outbox.ValidationError{Index: i, Field: "Message", Reason: "is nil"}
		}
		events[i] = toEvent(topic, msg, p.cfg)
		if field, reason := outbox.HeaderProblem(events[i]); field != "" {
			if field == "Headers" {
				field = "Metadata"
			}
			return nil, &originError{
				context: fmt.Sprintf("pgwatermill: publish to topic %q: message %q", topic, msg.UUID),
				err:     &outbox.ValidationError{Index: i, Field: field, Reason: reason},
			}
		}
	}
	return events, nil
}

// txOf returns the transaction Publish writes msgs in, or nil for one of
// its own. Transactions are told apart by their connection, which runs
// one at a time: comparing the pgx.Tx values with == would panic on a
// caller's wrapper type that is not comparable.
func (p *Publisher) txOf(msgs []*message.Message) (pgx.Tx, error) {
	if p.tx != nil {
		return p.tx, nil
	}
	var tx pgx.Tx
	for _, msg := range msgs {
		switch other := TxFromContext(msg.Context()); {
		case other == nil:
		case tx == nil:
			tx = other
		case other.Conn() != tx.Conn():
			return nil, ErrMixedTx
		}
	}
	if tx == nil && p.pool == nil {
		return nil, ErrNoTx
	}
	return tx, nil
}

func (p *Publisher) emit(ctx context.Context, tx pgx.Tx, topic string, events []outbox.Event) error {
	if _, err := p.em.Emit(ctx, tx, events...); err != nil {
		return &originError{context: fmt.Sprintf("pgwatermill: publish to topic %q", topic), err: err}
	}
	return nil
}

// Close makes later Publish calls return [ErrClosed]. It holds nothing to
// release (the pool and transactions are the caller's), returns nil and
// may be called any number of times.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
