// Package outbox is the vocabulary of pgoutbox: the [Event] a service emits,
// the [Status] an event row moves through, the stable error codes and errors
// every other package reports, the [Handler] and [Publisher] contracts a
// dispatcher delivers to, the retry policy, and the validation of the schema
// and table names that SQL is built from.
//
// It imports only the standard library and github.com/google/uuid, so that
// publishers and user code can depend on it without pulling in a database
// driver. Quoting of identifiers happens where SQL is built, never here.
//
// # Life of an event
//
//	Emit (in the caller's tx) ──commit──▶ PENDING ──claim──▶ PROCESSING
//	                                         ▲                  │
//	                                         │ retry (db clock) │ success ──▶ SENT
//	                                         └──────────────────┤
//	                 lease expired, recovered (no budget spent)─┘ failure ──▶ FAILED
//
// A rolled-back transaction leaves no row at all. Every transition out of
// PROCESSING is fenced by the lock token taken at claim, so a worker whose
// lease was lost cannot overwrite a newer outcome; it gets [ErrLockLost].
//
// # Delivery
//
// Delivery is at-least-once. [Event.ID] is stable from emit to every
// redelivery and is the consumers' idempotency key.
package outbox
