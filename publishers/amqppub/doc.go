// Package amqppub publishes pgoutbox events to RabbitMQ (AMQP 0-9-1).
//
// It is the broker end of the outbox: business code emits events in its
// own transaction, the dispatcher claims them and hands each batch, with
// the destination its router chose for every event (by default the event
// type), to a [Publisher]. The Publisher publishes the batch with
// publisher confirms and returns one outcome per event, which the
// dispatcher turns into SENT, a retry, or FAILED. Consumers read their
// queues with any AMQP client and rebuild the event with [Decode].
//
//	pub, err := amqppub.New(amqppub.Config{
//		URL:      "amqps://orders:secret@rabbit.internal:5671/shop", // or DialFunc for TLS settings
//		Exchange: "shop.events",                                     // declared by the deploy, not by pgoutbox
//	})
//	defer pub.Close()
//
// The Publisher owns its connection: it dials on the first Publish, and
// again on the first Publish after the connection was lost (Config.URL,
// or Config.DialFunc for TLS, credentials and other amqp.Config settings).
// The caller owns the topology: the Publisher declares no exchange, queue
// or binding, like natspub, which creates no stream; which queues hold an
// event is the broker's routing, set up by the service's deploy.
//
// # Routing
//
// Message.Destination maps to an exchange and a routing key: by default
// every message goes to Config.Exchange with the routing key
// Config.RoutingKeyPrefix followed by the destination, byte for byte
// (with the dispatcher's default router, the event type: a topic exchange
// and bindings such as "order.*" select by type). Config.RouteFunc
// replaces that rule, for instance an exchange per aggregate type; it
// takes a [RouteParams] struct, so fields can be added. [Publisher.Route]
// answers where a destination goes. With the default exchange ("") the
// routing key names a queue.
//
// # Publishing
//
// Every Publish call takes a channel of its own, in confirm mode: an idle
// one kept from an earlier call (up to Config.IdleChannels are kept), or a
// new one. A channel per call, rather than one shared channel with a
// confirm window, keeps calls apart: a channel error (a 403, 404 or 406 closes
// the channel) fails only the call that caused it, a call's returned
// messages and confirms are its own, and a channel's publishes reach the
// queues in order, which is what Features.KeyOrder relies on. The
// dispatcher's Concurrency bounds the calls, hence the channels (RabbitMQ
// allows 2,047 per connection by default). A channel is given back only
// when every message it carried was confirmed; otherwise it is closed, so
// a late confirm never reaches the next call.
//
// Within a call, messages are pipelined: up to Config.MaxInFlight are
// published and not yet confirmed (PublishWithDeferredConfirm), and
// Publish waits for each confirm in order. A message succeeds only once
// the broker acked it (basic.ack) without returning it. Every message is
// published with the mandatory flag, delivery mode persistent
// (delivery_mode 2: stored on disk by durable queues), message_id the
// event ID, type the event type, content_type the event's content type
// and timestamp its CreatedAt (in seconds).
//
// Before publishing to an exchange for the first time on a connection,
// the Publisher checks that it exists (a passive declare, on a channel of
// its own). Publishing to a missing exchange would make the broker close
// the call's channel (404 NOT_FOUND) and lose the confirms of every other
// message on it; with the check, only the messages for that exchange fail,
// retryably, and the others are published. The answer "exists" is kept for
// the connection; "missing" is asked again on the next call.
//
// # Headers
//
// The payload travels as the message body, unchanged. The message is a
// CloudEvent in the binary content mode of the CloudEvents AMQP protocol
// binding: the event's fields travel as CloudEvents attributes in headers
// named by the Header* constants, all starting with [HeaderPrefix]
// ("cloudEvents_", the binding's prefix for application properties, which
// RabbitMQ maps to and from AMQP 0-9-1 headers, so an AMQP 1.0 consumer
// of RabbitMQ 4 sees them as the binding says): [HeaderEventID],
// [HeaderSource], [HeaderSpecVersion], [HeaderEventType],
// [HeaderCreatedAt], [HeaderAggregateID], [HeaderPartitionKey],
// [HeaderAggregateType], [HeaderIdempotencyKey] and [HeaderAttempt], as
// AMQP strings; empty fields are left out. The datacontenttype attribute
// is the content_type property, as the binding says. AMQP strings are
// length-prefixed bytes, so values are not percent-encoded (the NATS
// binding needs that, AMQP does not). The event's own headers follow under
// their own names, as strings, an empty value included, so trace context
// (traceparent, tracestate) reaches consumers. Event.Delay is not
// transmitted. docs/envelope.md has the table.
//
// An event that breaks the header rule of package outbox (a row written
// around Emit) fails permanently with an error wrapping an
// *outbox.ValidationError (errors.Is outbox.ErrInvalidEvent, recorded as
// outbox.CodeInvalidEvent) that names the field and, for a header, its
// name, never a value. So does a user header named with [HeaderPrefix]
// (any case), or "CC" or "BCC" (RabbitMQ routes on them: sender-selected
// distribution), and a type, content type or header name longer than 255
// bytes, the longest AMQP short string.
//
// # Errors
//
// Each failure is wrapped with the exchange and routing key it was for
// and never contains payload bytes, header values or the URL's password.
// These are permanent (wrapped with outbox.Permanent, so the dispatcher
// records FAILED):
//
//   - unroutable: the exchange exists but routed the message to no queue,
//     so the broker returned it (basic.return, 312 NO_ROUTE) before
//     confirming it. The error wraps [ErrUnroutable] and names the
//     exchange and the routing key. With the default exchange, a queue
//     that is not declared yet makes its messages unroutable: declare
//     queues and bindings before events are emitted for them;
//   - the payload is larger than Config.MaxMessageSize, refused before it
//     is sent with an *outbox.ValidationError (errors.Is
//     outbox.ErrInvalidEvent and [ErrMessageTooLarge]) that gives both
//     sizes; or the broker closed the channel with 406 PRECONDITION_FAILED
//     "message size … is larger than configured max size" (wraps
//     ErrMessageTooLarge; recorded publish_error). Set MaxMessageSize to
//     the broker's max_message_size to get the first form;
//   - access refused: the broker closed the channel with 403
//     ACCESS_REFUSED because the user may not write to the exchange (or
//     to the routing key, with topic permissions), or the exchange is
//     internal. The message it names wraps [ErrAccessRefused] (recorded
//     publish_error), as a denied publish is for natspub and kafkapub;
//     the other messages the closed channel held are retried, as after a
//     lost channel. A 403 whose reason says the broker's authorization
//     backend returned an error (an LDAP or HTTP backend down) is an
//     outage instead, wrapping [ErrConnection]: retried, never FAILED;
//     so is a 403 whose reason the broker cut at 255 bytes (long names),
//     which may have lost that part;
//   - Config.RouteFunc failed, the route is longer than 255 bytes, the
//     event ID is zero, or a field breaks the header rule (see Headers).
//
// A nack (basic.nack: the broker could not store the message, e.g. a
// queue at its x-max-length with x-overflow reject-publish) reports
// [ErrNacked]: retryable, spending an attempt, not an outage.
//
// # Outages
//
// An outage is never permanent, so it never dead-letters an event at
// once. These are outages, wrapped with outbox.Unavailable:
//
//   - the exchange does not exist ([ErrMissingExchange], 404): not
//     declared yet, as before a deploy. The error says so; the events
//     are published once it is declared;
//   - the connection cannot be dialled, or the connection or the call's
//     channel is lost or closed ([ErrConnection]);
//   - the broker blocked the connection (connection.blocked, sent during
//     a memory or disk alarm): a call fails at once with [ErrBlocked]
//     without publishing, and a call waiting for confirms when the block
//     comes fails at once too, rather than wait out ConfirmTimeout;
//     publishing resumes after connection.unblocked;
//   - a message is not confirmed, or the call's channel opening or
//     exchange check not answered, within Config.ConfirmTimeout
//     ([ErrConfirmTimeout]). The connection is then dropped, since it may
//     be dead for as long as its heartbeat takes to tell, and the next
//     call dials again;
//   - the dispatcher's PublishTimeout: ctx's deadline passed.
//
// A cancelled ctx (the dispatcher stopping) is retryable and no outage.
// When every message of a call reports unavailable, the dispatcher
// returns the events to PENDING without spending an attempt and opens its
// circuit, probing with one small claim after a backoff until a probe is
// published (docs/dispatcher.md, "Outages"). A message that was not
// confirmed may still have been stored: RabbitMQ does not deduplicate, so
// a retry can deliver it twice; consumers deduplicate on the event ID
// (message_id, see package inbox).
//
// Publish returns when ctx ends, even while it dials, opens its channel or
// checks an exchange; what it was waiting for finishes in the background.
// A broker that stalls but still sends heartbeats never lets the
// connection time out, so Publish bounds these waits by ConfirmTimeout
// too: when the broker has not answered opening a channel or checking an
// exchange by then, every message reports [ErrConfirmTimeout] and the
// connection is dropped. Close waits at most ConfirmTimeout for the
// broker to answer its close, then closes the socket.
//
// The default DialFunc gives every socket write a deadline of
// ConfirmTimeout, so a broker that stops reading cannot hang Publish on a
// write; a dial and its handshake are bounded by ConfirmTimeout too.
//
// # Order per key
//
// A call publishes on one channel, in the order of the batch, and RabbitMQ
// enqueues a channel's messages in that order; but it enqueues a message
// even when an earlier one was returned or nacked. With Config.KeyOrder
// the messages of one outbox.OrderKey are published one at a time, each
// after the confirm of the one before, and after a key's first failure
// the rest of the key is reported with outbox.ErrNotAttempted without
// being published, so the dispatcher returns those events to PENDING
// without spending an attempt ([Publisher.PublishesKeysInOrder],
// outbox.KeyOrderedPublisher). Keys, and messages without a key, still
// share the window; a call holding many messages of one key pays a round
// trip for each. Order holds per queue; consumers that share a queue, or
// prefetch more than one message, can still process them out of order.
//
// # Message size
//
// RabbitMQ bounds the body: max_message_size is 128 MiB on RabbitMQ 3.8
// to 3.13 and 16 MiB on RabbitMQ 4, which is the default of
// Config.MaxMessageSize. The emitter's default payload limit
// (emitter.DefaultMaxPayloadBytes, 900 KiB) is well below either, so an
// event Emit accepts with its defaults fits. Headers are not counted by
// that limit; AMQP frames them apart (frame_max), so they never split a
// payload.
package amqppub
