package outbox

import "errors"

// OrderKey returns the key that orders e among other events: PartitionKey,
// else AggregateID; "" when neither is set, and such an event is ordered
// with no other. It is the database's coalesce(partition_key,
// aggregate_id) (Emit stores an empty string as NULL) and the record key
// kafkapub sends by default.
func OrderKey(e Event) string {
	if e.PartitionKey != "" {
		return e.PartitionKey
	}
	return e.AggregateID
}

// KeyOrderedPublisher is a Publisher that keeps the order of each key
// within one Publish call. While PublishesKeysInOrder reports true, it
// promises, for the messages of one call with the same non-empty
// [OrderKey]:
//
//   - they are delivered in slice order: a consumer of the destination
//     never sees one before an earlier one of the call;
//   - after the first of them that fails (its error is not nil), every
//     later one of that key in the call fails without being delivered,
//     with an error that wraps [ErrNotAttempted], so that the dispatcher
//     returns it to PENDING without spending an attempt.
//
// A failed message itself may still have been delivered (an
// acknowledgement lost, a context ended while it was in flight): a retry
// then delivers it again, at least once, never after a later message of
// its key. Messages without a key, and messages of different keys, keep no
// order among each other.
//
// A dispatcher with per-key ordering sends a key's run of consecutive
// events in one call to such a publisher, and one event per key and call
// to any other.
type KeyOrderedPublisher interface {
	Publisher
	// PublishesKeysInOrder reports whether the promise above holds for
	// the publisher as configured. It returns the same value for the life
	// of the publisher.
	PublishesKeysInOrder() bool
}

// ErrNotAttempted is wrapped by the error a [KeyOrderedPublisher] returns
// for a message it did not try to deliver because an earlier message of
// its key in the same call failed. The message was not sent; the
// dispatcher releases its event to PENDING without spending an attempt.
var ErrNotAttempted = errors.New("pgoutbox: not attempted: an earlier message of its key failed")
