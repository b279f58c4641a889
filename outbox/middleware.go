package outbox

// Middleware wraps a [Handler] with behaviour of its own (a span, a
// metric, a log line, a timeout, decoding) and returns the wrapped
// handler. It is called once, when the dispatcher registers a handler,
// never per event; the handler it returns runs for every event and must
// call next to deliver the event (or return without calling it to skip
// the handler, with the error that decides the outcome).
//
// A middleware sees the handler's error before the dispatcher does, so it
// may wrap it (for example with [Permanent]) or replace it. It must keep
// the contract of [Handler]: return promptly once ctx is done, and never
// put payload bytes into an error.
type Middleware func(next Handler) Handler
