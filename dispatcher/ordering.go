package dispatcher

// Ordering chooses whether a dispatcher keeps the order of each key's
// events (see Config.Ordering).
type Ordering int

const (
	// Unordered (the default) hands events to handlers and the publisher
	// as handler slots and batches allow: the events of one key may be
	// delivered in any order, and several at once. With Concurrency 1 a
	// dispatcher still hands out its events in claim order.
	Unordered Ordering = iota
	// PerKey delivers the events of one order key (outbox.OrderKey:
	// PartitionKey, else AggregateID) one after another, in the order
	// their rows were inserted (seq): no event is handed to a handler or
	// the publisher while an earlier event of its key is PENDING (due or
	// waiting for a retry or a snooze), PROCESSING, or FAILED under
	// HeadPolicy BlockKey. Events without a key are unordered; different
	// keys never wait for each other. A redelivery after a lost lease may
	// follow the key's later events (at-least-once).
	PerKey
)

// String names the ordering.
func (o Ordering) String() string {
	if o == PerKey {
		return "per-key"
	}
	return "unordered"
}

// HeadPolicy chooses what a FAILED event does to the later events of its
// key under Ordering PerKey (see Config.HeadPolicy).
type HeadPolicy int

const (
	// BlockKey (the default) holds the later events of a key behind its
	// FAILED event until an operator replays it (admin replay) or skips it
	// (admin.SkipHeads, outboxctl skip). Other keys go on.
	BlockKey HeadPolicy = iota
	// SkipFailed lets the later events of a key go on past a FAILED event:
	// the key's order holds among the events that are delivered.
	SkipFailed
)

// String names the policy.
func (p HeadPolicy) String() string {
	if p == SkipFailed {
		return "skip-failed"
	}
	return "block-key"
}

// OrderScope chooses what the order of Ordering PerKey spans (see
// Config.OrderScope).
type OrderScope int

const (
	// ScopeKey (the default) keeps one order per order key across every
	// event type: the head of a key, whatever its type, holds the key's
	// later events of every type.
	ScopeKey OrderScope = iota
	// ScopeKeyAndType keeps one order per order key and event type: the
	// head of (key, type) holds only that pair's later events, and the
	// key's events of other types go on past it (in their own order).
	// Events of one key and different types may then be delivered in any
	// order relative to each other, and at once.
	ScopeKeyAndType
)

// String names the scope.
func (s OrderScope) String() string {
	if s == ScopeKeyAndType {
		return "key-and-type"
	}
	return "key"
}
