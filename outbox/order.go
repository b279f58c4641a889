package outbox

import "errors"

// OrderKey returns the key that orders e among the other events of its
// table under per-key ordering (a dispatcher's Ordering PerKey): its
// PartitionKey, else its AggregateID, else "" (the event has no key and is
// unordered). It is the key kafkapub's default KeyFunc sends, and the
// database's coalesce(partition_key, aggregate_id): Emit stores an empty
// PartitionKey or AggregateID as NULL.
func OrderKey(e Event) string {
	if e.PartitionKey != "" {
		return e.PartitionKey
	}
	return e.AggregateID
}

// KeyOrderedPublisher is a Publisher that keeps the order of each key
// within one Publish call. When PublishesKeysInOrder reports true, the
// publisher promises, for the messages of one call that share an order
// key (see [OrderKey]):
//
//   - they are delivered in the order of the slice (a Kafka producer
//     that sends them to one partition, in order, idempotently; a NATS
//     publisher that awaits each acknowledgement before the next);
//   - once one of them fails, every later one of that key in the call
//     fails too without being delivered, with an error that wraps
//     [ErrNotAttempted].
//
// A dispatcher with per-key ordering then sends a key's consecutive
// publish-only events in one call, rather than one call per event. A
// publisher that cannot keep the promise for its current configuration
// returns false.
type KeyOrderedPublisher interface {
	Publisher
	// PublishesKeysInOrder reports whether the promise above holds.
	PublishesKeysInOrder() bool
}

// ErrNotAttempted is wrapped by the error a KeyOrderedPublisher returns
// for a message it did not try to deliver because an earlier message of
// the same key in the call failed. The dispatcher returns such an event
// to PENDING without spending an attempt.
var ErrNotAttempted = errors.New("pgoutbox: not attempted: an earlier message of its key failed")
