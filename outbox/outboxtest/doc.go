// Package outboxtest is the conformance suite every outbox.Publisher must
// pass, so that the dispatcher can rely on the same behaviour from Kafka,
// NATS JetStream or any broker a user plugs in.
//
// A publisher's own tests call [RunPublisherSuite] with a [Harness] that
// creates the publisher, gives fresh destinations (topics, subjects) and
// reads back what arrived, decoded into events, and with the [Features] the
// broker has. The suite checks that:
//
//   - every event of a batch of 1,000 arrives with its ID, type, aggregate,
//     keys, content type, headers and payload intact, at the destination
//     the message named;
//   - outcomes are per event: in a batch where some messages cannot be
//     delivered, exactly those report errors, and permanent ones are marked
//     with outbox.Permanent;
//   - a cancelled context makes Publish return promptly, with every
//     message it could not confirm reported by a retryable error;
//   - publishing the same event twice is deduplicated by the broker, where
//     Features.ServerDedupe says it can be;
//   - messages of one key arrive in batch order, where
//     Features.KeyOrder says the broker keeps it;
//   - every field that travels as a broker header arrives byte for byte
//     at the edges of the header rule (see [HeaderCases]), and an event
//     that breaks the rule arrives byte for byte too or fails permanently
//     with an error matching outbox.ErrInvalidEvent;
//   - the message is a CloudEvent in binary content mode, each field of
//     the event under its attribute (see outbox.AttrID and after), where
//     Features.CloudEvents says the publisher sends that envelope;
//   - errors never contain payload bytes or header values.
//
// A publisher's own fuzz target for its header encoding can take the
// seeds of [AddEventSeeds] and build its events with [FuzzEvent], as
// kafkapub's and natspub's FuzzHeaders do.
//
// To test code that emits events (rather than a publisher), use
// github.com/pgoutbox/pgoutbox/pgoutboxtest.
package outboxtest
