// Package pgwatermill connects pgoutbox to Watermill: a message.Publisher
// that writes messages into the outbox inside the caller's pgx.Tx, and a
// message.Subscriber that hands out the committed events through
// pgoutbox dispatchers, with Watermill's Ack and Nack deciding each
// event's outcome. Services that speak Watermill keep its router,
// middleware and Pub/Subs, and gain the transactional outbox: a message
// is published if and only if the business transaction commits.
//
// The package is named pgwatermill, not watermill, so that it sits in the
// same file as Watermill's own watermill package (watermill.NewUUID,
// loggers) without an import alias.
//
//	pub, _ := pgwatermill.NewPublisher(nil, pgwatermill.PublisherConfig{Emitter: emitter.Config{Table: table}})
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... business writes in tx ...
//		msg := message.NewMessage(watermill.NewUUID(), payload)
//		msg.SetContext(pgwatermill.WithTx(ctx, tx))
//		return pub.Publish("order.created", msg) // visible at commit, gone on rollback
//	})
//
//	sub, _ := pgwatermill.NewSubscriber(pool, pgwatermill.SubscriberConfig{Dispatcher: dispatcher.Config{Table: table}})
//	defer sub.Close()
//	msgs, _ := sub.Subscribe(ctx, "order.created")
//	for msg := range msgs {
//		handle(msg)
//		msg.Ack() // SENT; Nack: retried on the backoff, spending an attempt
//	}
//
// # Publishing
//
// Publish writes every message of one call with one emitter.Emit, in one
// transaction: all or none. The transaction is the one of
// [NewTxPublisher] (one Publisher per transaction, like watermill-sql's),
// else the one the messages' contexts carry ([WithTx]), else, for a
// Publisher made by [NewPublisher] with a pool, one of its own, committed
// before Publish returns: a deliberate convenience for messages that
// belong to no business transaction (Watermill's universal test suite
// publishes so). Give NewPublisher a nil pool and a Publish without a
// transaction returns [ErrNoTx] instead: no event can then be written
// outside a business transaction by mistake.
//
// A message becomes an event so:
//
//   - the topic is the event type (Event.Type), which dispatchers route
//     on; all topics share the one outbox table;
//   - the message's UUID is the event ID when it is a canonical UUID
//     string (what watermill.NewUUID makes), else the UUIDv5 of it, and
//     then the UUID travels in the [MetadataUUID] header ([EventID]); with
//     PublisherConfig.NewEventIDs every message gets a fresh UUIDv7 and
//     its UUID travels in the header. Either way the Subscriber gives back
//     the message's UUID as msg.UUID;
//   - the reserved metadata keys ([MetadataPartitionKey],
//     [MetadataAggregateType], [MetadataAggregateID],
//     [MetadataContentType], [MetadataIdempotencyKey]) set the event's
//     fields; PublisherConfig.OrderKeyFunc sets the order key of messages
//     without one; every other metadata entry is an event header;
//   - the payload is the payload.
//
// Metadata must follow the outbox's header rule (see package outbox):
// keys are header names (RFC 9110 tokens; in any case, not starting with
// ce_, ce-, cloudEvents_ or Nats-, and not Content-Type, Status,
// Description, CC or BCC), values UTF-8 without NUL, CR or LF and not padded with
// spaces or tabs. A message that breaks it, a nil message, or any event
// Emit refuses fails the whole call with an *outbox.ValidationError
// naming the message's index, before anything is sent: nothing is
// written and the caller's transaction is still usable. Errors of the
// database leave the caller's transaction aborted, like any failed
// statement; the one a caller may expect is a message published again
// whose event is still in the outbox (outbox.ErrDuplicateID, without
// NewEventIDs): publish through a savepoint where the transaction must
// survive it (see Publisher.Publish). Error texts never quote payloads
// or metadata values.
//
// # Subscribing
//
// Each Subscribe call runs a dispatcher (dispatcher.New, Handle(topic),
// Start) on the Subscriber's pool and SubscriberConfig.Dispatcher. It
// claims only the events of its topic, so events of topics nobody
// subscribes to stay PENDING, and two Subscribe calls on one topic, in
// one process or many, share its events: each event goes to one of them
// (no consumer groups). A message is handed out for each event and waits
// for the consumer:
//
//   - Ack: the handler returns nil and the event is SENT;
//   - Nack: the handler returns [ErrNacked], an ordinary failure: the
//     event is retried after the dispatcher's Backoff and spends an
//     attempt; past MaxAttempts it is FAILED (the dead letter, see
//     outboxctl), where a Watermill broker would redeliver it forever;
//   - the subscription stops (its ctx ends, or Close): every message not
//     yet acknowledged is given back, PENDING again with no attempt spent
//     (the dispatcher's stop with NoDrain); an Ack after that changes
//     nothing, and the event is delivered again later;
//   - HandlerTimeout, when set, is an ack deadline: a message neither
//     acknowledged nor nacked by then is retried, spending an attempt,
//     and one the consumer never took from the channel is snoozed
//     (outbox.Snooze(0): no attempt spent). By default there is none.
//
// A message's Context carries the Subscribe ctx's values and ends when
// the outcome is decided (Ack, Nack, stop). Its metadata are the event's
// headers and the reserved keys of its fields; its UUID is the published
// message's.
//
// # Guarantees
//
// Delivery is at least once: a consumer that crashes after its work and
// before its Ack sees the message again (deduplicate on msg.UUID, or on
// the event ID). With dispatcher.Config Ordering PerKey (and migrations
// KeyOrder), the messages of one order key are handed out one at a time,
// in order, each after the previous one was acknowledged; put every
// message of a topic under one key (OrderKeyFunc returning the topic) for
// Watermill's guaranteed order. Otherwise messages come in no particular
// order. Messages are persistent: they are rows, and a new subscriber
// receives those not yet SENT (not those already consumed: no replay).
// docs/watermill.md has the features table and the comparison with
// Watermill's own SQL Pub/Sub and forwarder.
package pgwatermill
