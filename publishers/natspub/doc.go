// Package natspub publishes pgoutbox events to NATS JetStream.
//
// It is the broker end of the outbox: business code emits events in its
// own transaction, the dispatcher claims them and hands each batch, with
// the destination its router chose for every event (by default the event
// type), to a [Publisher]. The Publisher sends the batch to JetStream and
// returns one outcome per event, which the dispatcher turns into SENT, a
// retry, or FAILED. Consumers read the stream with any NATS client and
// rebuild the event with [Decode] or [DecodeJetStream].
//
//	nc, _ := nats.Connect(url)               // TLS, credentials: nats.Option
//	js, _ := jetstream.New(nc)               // domain, async limits: jetstream.JetStreamOpt
//	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: "events."})
//
// The caller owns the connection and the streams: the Publisher creates
// no stream, and every subject it publishes on must be captured by one.
//
// # Publishing
//
// Publish pipelines the batch with the asynchronous JetStream API
// (PublishMsgAsync), keeping up to Config.MaxPending messages in flight,
// and waits for every PubAck. A message is a success only once the stream
// has acknowledged it. When ctx ends, Publish returns at once and every
// message not yet acknowledged reports ctx.Err(), wrapped; when an ack does
// not come within Config.AckTimeout, the message reports [ErrAckTimeout].
// Both are retryable: the message may or may not be stored, and
// deduplication (below) absorbs the re-publish.
//
// Give the jetstream.JetStream a publish-ack timeout of its own
// (jetstream.WithPublishAsyncTimeout): the client keeps every unanswered
// publish in its in-flight table until an ack, a disconnect or that
// timeout, and a full table stalls every publisher on the connection.
//
// # Subjects
//
// The subject is Config.SubjectPrefix followed by Message.Destination,
// byte for byte. A subject that is empty, has an empty token, a wildcard
// token or white space fails that message permanently without sending it.
//
// # Headers
//
// The payload travels as the message data, unchanged. The message is a
// CloudEvent in the binary content mode of the CloudEvents NATS protocol
// binding: the event's fields travel as CloudEvents attributes in headers
// named by the Header* constants, all starting with [HeaderPrefix]
// ("ce-"): [HeaderEventID], [HeaderSource], [HeaderSpecVersion],
// [HeaderEventType], [HeaderCreatedAt], [HeaderAggregateID],
// [HeaderContentType], [HeaderPartitionKey], [HeaderAggregateType],
// [HeaderIdempotencyKey] and [HeaderAttempt], each value percent-encoded
// as the binding requires (docs/envelope.md has the table); empty fields
// are left out. The
// event's own headers follow under their own names, an empty value
// included, so trace context (traceparent, tracestate) reaches consumers
// as NATS clients expect it. Event.Delay is not transmitted.
//
// NATS headers are MIME-like lines: nats.go refuses a header name that is
// not a token, trims spaces and tabs around values and turns CR and LF
// inside them into spaces. What the emitter accepts (the header rule of
// package outbox) arrives byte for byte. An event that breaks the rule, a
// row written around Emit, fails permanently with an error wrapping an
// *outbox.ValidationError (errors.Is outbox.ErrInvalidEvent, recorded as
// outbox.CodeInvalidEvent) that names the field and, for a header, its
// name, never a value: sending it would change it or fail with a
// retryable client error. So does a user header whose name starts with
// [HeaderPrefix] ("ce-") or with "Nats-" (any case): letting it through would
// either be ambiguous on decode or change what the server does
// (Nats-Msg-Id would defeat deduplication, Nats-Rollup can purge a
// subject), and dropping it would lose data silently.
//
// # Deduplication
//
// Every message carries Nats-Msg-Id = the event ID (jetstream.MsgIDHeader).
// The stream drops a second message with the same ID and answers with a
// PubAck marked Duplicate, which Publish counts as a success. So a batch
// re-published after a crash, a lost ack or a lease taken over by another
// dispatcher replica is stored once — but only within the stream's
// duplicate window (StreamConfig.Duplicates, 2 minutes by default). An
// event re-published later than that, for example after an outage longer
// than the window or a retry backoff longer than it, is stored again.
// Delivery to consumers is at-least-once in any case (a consumer may see
// a message again after a failed ack), so consumers still deduplicate on
// the event ID, in their own transaction: that is what the inbox package
// is for. Widen Duplicates to cover the longest gap you expect between
// two attempts of one event.
//
// # Order
//
// Within one Publish call, the messages the stream stores are stored in
// the order of the batch: they are written in that order on one
// connection, the server queues a connection's messages to the stream in
// order, and the Publisher turns off the client's automatic re-send on
// "no responders" (jetstream.WithRetryAttempts(0)), which could store a
// message after later ones. But the stream stores a message even when an
// earlier one of the call failed (too large for the stream, no stream for
// its subject, a limit reached): the failed one is retried by the
// dispatcher in a later batch, after the ones that succeeded, so order
// across attempts is not kept.
//
// Config.KeyOrder keeps it per outbox.OrderKey (PartitionKey, else
// AggregateID), for a dispatcher whose Ordering is PerKey: a key's next
// message is sent only once the stream acknowledged the previous one, and
// after a key's first failure the rest of the key in the call is reported
// with outbox.ErrNotAttempted without being sent, so the dispatcher
// returns those events to PENDING without spending an attempt
// ([Publisher.PublishesKeysInOrder], outbox.KeyOrderedPublisher). Keys, and
// messages without a key, still share the pipeline; a call holding many
// messages of one key pays a round trip for each.
//
// # Errors
//
// Each failure is wrapped with the subject it was for and never contains
// payload bytes or header values. These are permanent (wrapped with
// outbox.Permanent, so the dispatcher records FAILED):
//
//   - the message, headers included, is larger than the server's
//     max_payload (nats.Conn.MaxPayload; 1 MiB unless the server sets
//     max_payload). It is refused before it is sent, with an
//     *outbox.ValidationError (errors.Is outbox.ErrInvalidEvent, recorded
//     as outbox.CodeInvalidEvent, and nats.ErrMaxPayload) whose text gives
//     the payload size, the size with headers and the server's limit (see
//     Message size below);
//   - the message is larger than the stream's max message size
//     (jetstream.ErrStreamMessageExceedsMaximum);
//   - the connection may not publish on the subject
//     (nats.ErrPermissionViolation). The server answers such a publish
//     with an asynchronous error and no ack, so it is reported once
//     Config.AckTimeout has passed, by matching the connection's last
//     error against the subject;
//   - a malformed subject, a zero event ID, a field that breaks the header
//     rule (a reserved user header among them; see Headers above), or a
//     header the client still refuses to encode (nats.ErrBadHeaderMsg).
//
// Everything else is retryable, outages above all (see below): no stream
// answering for the subject, ack timeouts, disconnects, a closed
// connection, a full in-flight table, storage errors, the end of ctx.
//
// # Outages
//
// An outage is never permanent, so it never dead-letters an event at
// once. These are outages:
//
//   - no stream captures the subject (the server answers "no
//     responders": jetstream.ErrNoStreamResponse): the stream is not
//     created yet (events emitted before a deploy creates it), it has no
//     leader for the moment, or JetStream is not ready after a restart.
//     The error says so; the events are stored once a stream answers;
//   - the connection is lost or closed, or the server does not answer:
//     nats.ErrDisconnected, nats.ErrConnectionClosed, [ErrAckTimeout].
//     nats.go buffers what is published while it reconnects and may send
//     it after Publish gave up on it; deduplication absorbs the
//     re-publish within the stream's duplicate window.
//
// These errors, and a Publish whose context's deadline passed before
// its PubAcks came, are wrapped with outbox.Unavailable (so is a full
// in-flight table: jetstream.ErrTooManyStalledMsgs, acks that do not
// come). When every message of a call reports unavailable, the
// dispatcher returns the events to PENDING without spending an attempt
// and opens its circuit: it stops publishing and probes with one small
// claim after a backoff, until a probe is stored (see the dispatcher's
// documentation and docs/dispatcher.md, "Outages"). An outage therefore
// never makes an event FAILED, however long it lasts. A subject that no
// stream captures looks to the client exactly like JetStream being down
// ("no responders"), so it too holds its events PENDING, logged at WARN
// with the cause, until the stream is created. A call in which some
// messages were stored, or failed for another reason, is no outage: its
// failures spend an attempt each, as any retryable failure does. An
// attempt against a dead connection takes up to Config.AckTimeout; one
// for a subject no stream captures returns at once.
//
// # Message size
//
// The server's max_payload (1 MiB by default) bounds the headers and the
// data of a message together. The headers of an event from this
// Publisher take a few hundred bytes (the ce- attributes, Nats-Msg-Id)
// plus the event's own headers; with the emitter's default limits they
// take at most about 32 KiB, and the emitter's default payload limit
// (emitter.DefaultMaxPayloadBytes, 900 KiB) leaves that room, so an
// event Emit accepts with its defaults fits a server with the default
// max_payload. A larger message is refused up front, permanently, as
// described under Errors: raise max_payload on the server, or lower
// emitter.Config.MaxPayloadBytes to match it.
package natspub
