// Package relay publishes the events of an append-only log table to a
// broker, in commit order per key, for throughput: the second way
// pgoutbox delivers, beside package dispatcher.
//
// Business transactions write events into the log (emitter.Emit with
// emitter.Config.Kind outbox.KindLog): one heap row and one index entry
// each, with the writing transaction's id. A ticker records snapshots of
// the database (ticks). A batch is every event visible in one tick's
// snapshot and not in the previous one (PgQ's rule), so a late commit is
// never skipped and a long transaction delays only its own events. One
// relay per consumer group holds a token-fenced lease on the group's
// cursor, feeds the publisher in lanes (by key hash), and moves the cursor
// only after every event of the batch was acked or parked. See
// docs/relay.md for the operator's guide and docs/relay-design.md for the
// design.
//
// # Relay or dispatcher
//
// Choose the relay to publish to a broker (Kafka, NATS JetStream) when
// order and throughput matter more than per-event retries: it writes no
// row per delivery, reads a batch with one statement, and keeps each key's
// commit order. Choose the dispatcher for local handlers, per-event
// retries at database-clock times, dead letters, snoozes and delayed
// events: the relay has none of those (a key whose event keeps failing is
// parked, with its later events, until an operator replays or skips it).
//
// # Guarantees
//
//   - At-least-once: an event is published at least once per group. The
//     cursor moves after the broker acked every event of the batch, in
//     one transaction with the events parked; a crash, a kill or a lease
//     lost between the acks and the move publishes the batch again.
//   - The event id is the dedupe key: it is the same on every publish of
//     an event (natspub sets it as Nats-Msg-Id; Kafka consumers dedupe by
//     it).
//   - Per-key order: the events of one order key (outbox.OrderKey) are
//     published in commit order across batches, and in insert order
//     within one batch (the same key's writers must lock the key's row
//     before they emit; see docs/relay.md).
//   - The duplicate window is the batch in flight: the events acked but
//     whose cursor move did not commit (DrainTimeout cut, kill, a pause
//     past GroupLease, a database restart during the move).
//
// # Life
//
// New validates the Config and touches nothing. Start runs the start-up
// checks (the log's schema, the group, head-room) and returns their error;
// Run does the same and blocks. Relaying starts the services in order —
// the lag sampler, the ticker (unless NoTicker), retention (unless
// NoRetention), the reader with its lanes — and a stop (Stop, the end of
// the context, or a service ending with an error such as a stopped group,
// *StopError) stops them in reverse: the reader first finishes its batch
// in flight within DrainTimeout. Stop, Done and Err follow the
// dispatcher's life: idempotent, safe before Start, bounded by ctx.
//
// # Health, Stats and telemetry
//
// Health reports the state, the leases this relay holds, the last batch
// and tick, the circuit, the lag (sampled every second while running),
// the head-room of the log's parts, and Degraded: the reasons an operator
// should look. Stats counts published and parked events, batches, retries
// and ticks. Metrics (pgoutbox.relay.*, attributes pgoutbox.table and
// pgoutbox.relay.group) and the span pgoutbox.relay.batch go through the
// OpenTelemetry API to Config.MeterProvider and Config.TracerProvider.
package relay
