// Package outbox is the vocabulary of pgoutbox: the [Event] a service emits,
// the [Status] an event row moves through, the stable error codes and errors
// every other package reports, the [Handler] and [Publisher] contracts a
// dispatcher delivers to, the retry policy, the [Table] an outbox lives in,
// and the envelope: the CloudEvents attribute names publishers send an
// event's fields under ([AttrID] and the constants after it).
//
// It imports only the standard library, github.com/google/uuid and an
// internal package of its own module, so that
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
// A handler may also give its event back with [Snooze]: PENDING again at a
// later database time, without spending an attempt. A [Middleware] wraps
// handlers; [JSONHandler] decodes payloads for them.
//
// A rolled-back transaction leaves no row at all. Every transition out of
// PROCESSING is fenced by the lock token taken at claim, so a worker whose
// lease was lost cannot overwrite a newer outcome; it gets [ErrLockLost].
//
// # Delivery
//
// Delivery is at-least-once. [Event.ID] is stable from emit to every
// redelivery and is the consumers' idempotency key.
//
// # The header rule
//
// Publishers send an event's Type, AggregateType, AggregateID,
// PartitionKey, IdempotencyKey, ContentType and Headers as broker message
// headers. Kafka headers are bytes and carry anything. NATS headers are
// MIME-like lines, "Name: value" ending in CRLF: nats.go refuses a name
// that is not an RFC 9110 token, trims spaces and tabs (and CR, LF) around
// a value, turns CR and LF inside it into spaces, and its decoder skips
// spaces and tabs after the colon. Every other byte of a value, control
// characters and non-ASCII UTF-8 included, arrives as sent. So, for every
// field that travels as a header, the rule is:
//
//   - a header name is 1 or more RFC 9110 token characters (ASCII letters,
//     digits and !#$%&'*+-.^_`|~), does not start with "ce_", "ce-" or
//     "Nats-" in any case (the CloudEvents attributes the event's own
//     fields travel as, see [AttrID], and the headers the NATS server acts
//     on), and is not "Content-Type", "Status" or "Description" in any
//     case (Content-Type carries the content type on Kafka; NATS clients
//     take a bodiless message with a Status header for a control message
//     and never deliver it);
//   - a value (a header's value, or one of those fields) is valid UTF-8
//     without NUL, CR or LF, and does not start or end with a space or a
//     tab. An empty value is fine: a header with an empty value arrives
//     with an empty value, and an empty field is not sent.
//
// [HeaderProblem] checks it. Emit rejects an event that breaks it, so a
// publisher meets one only in a row written around Emit; a shipped
// publisher that cannot carry such an event byte for byte fails it with a
// permanent error wrapping a *[ValidationError] (errors.Is
// [ErrInvalidEvent]), which the dispatcher records as [CodeInvalidEvent].
package outbox
