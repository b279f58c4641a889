// Package lanes is the log relay's publishing engine for one consumer
// group: it takes a batch of events (read by internal/relay/read between
// two ticks, in seq order), publishes them through the group's
// outbox.Publisher, and says what became of each: acked, parked, or
// skipped (empty route). The reader moves the group's cursor, with the
// parked events and keys, only after Publish returned without error; so
// delivery is at least once, and per key in seq order. No SQL, and no
// goroutine outlives a Publish call but the circuit's timer.
//
// # Lanes
//
// An event goes to lane FNV-1a(key) % Lanes, a keyless one to seq % Lanes,
// so a key always goes to the same lane. The lanes of a batch run at once;
// Publish returns when all are done. Within a lane each key is a queue in
// seq order (a keyless event a queue of its own). A lane publishes in
// waves: one Publisher.Publish call carries the head of each key that may
// go now, up to MaxPerCall messages, starting each wave where the last
// stopped (round robin over keys). A publisher that is an
// outbox.KeyOrderedPublisher reporting true gets a key's whole run in one
// call instead, and answers outbox.ErrNotAttempted for a key's messages
// after the key's first failure in the call; those stay pending,
// uncharged. Either way no event of a key is acked before an earlier one:
// a key's next event is sent only once the previous one is acked.
//
// Publish calls are serialized: give the group's batches in order, from
// one goroutine. A lane keeps its buffers from batch to batch (none of a
// batch's events once Publish returned).
//
// # Failures
//
// Each message's result:
//
//   - nil: acked (Result.Published).
//   - outbox.ErrNotAttempted: stays pending, nothing spent.
//   - outbox.IsPermanent: the event is parked with the publisher's code
//     (publish_error, invalid_event, timeout when the call's
//     PublishTimeout ended it, panic) and text; its key's later events of
//     the batch are parked behind it (CodeKeyParked), the key goes into
//     Result.NewKeys. A keyless event is parked alone.
//   - any other error: the event is published again after RetryMin,
//     doubling up to RetryMax, at most KeyRetries times; then it is parked
//     as a permanent failure is ("retries spent after n attempts: ...").
//     While a key waits for its retry, only that key waits: the lane's
//     other keys go on (per-key order stays strict, and a slow key delays
//     the batch, not its lane's other keys).
//
// Events of a key given in Publish's parked set (parked in an earlier
// batch) are parked at once, unpublished, with CodeKeyParked.
//
// # Outage: the circuit
//
// A call whose every attempted message failed with outbox.ErrUnavailable
// (and none permanent) is an outage, judged as the dispatcher judges one
// (internal/run): nothing of the call is spent or parked, its events stay
// pending, and the circuit (internal/circuit, used as one catch-all type)
// opens for CircuitMinBackoff. Every lane asks the circuit before each
// call, so all stop; calls begun before it opened finish and are judged
// alike. When the backoff ends, the first lane to ask sends a probe of at
// most ProbeSize of its pending events: an outage opens the circuit again
// with twice the backoff (up to CircuitMaxBackoff); any other answer
// closes it and wakes every lane. Publish keeps waiting (the batch in
// memory) until the destination is back or ctx ends.
//
//	Closed --outage--> Open --backoff ends--> Probing --probe reached--> Closed
//	                    ^                        |
//	                    +---------outage---------+
//
// # Stopping
//
// When ctx ends (or Close is called) Publish returns promptly with an
// error matching ctx's cause (ErrClosed) and no Result. A probe cut short
// is handed back to the circuit, so that the next Publish probes again.
// The reader then must not move its cursor: the batch is published again,
// and the events acked meanwhile are delivered twice (consumers dedupe by
// event id).
package lanes
