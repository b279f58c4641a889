// Package pgvalue holds the rules for the Go values the library passes to
// PostgreSQL, so that each is written once: the strings that go into text
// columns and NOTIFY channels, and the UUIDs passed as parameters. The
// emitter, the inbox, admin, the lease store and the dispatcher's
// configuration use it.
//
// # Text
//
// [TextProblem] is the one rule for strings that go into PostgreSQL text
// columns and NOTIFY channels: bounded in bytes, valid UTF-8 and free of
// NUL (which text cannot hold). The emitter, the inbox, admin's filters
// and the dispatcher's configuration all check their strings with it.
// Strings that also travel as broker headers follow the header rule of
// package outbox as well (outbox.HeaderProblem).
//
// # UUIDs
//
// [UUID] and [UUIDs] pass UUIDs to pgx in the one form every pgx query
// exec mode encodes well: [pgtype.UUID]. When pgx knows a parameter's type
// (cache_statement, cache_describe, describe_exec) it encodes it in
// binary, without an allocation; when it must pick the type from the Go
// value (exec, simple_protocol, and so behind transaction-mode poolers)
// it finds uuid, or uuid[] for the array, and encodes text. A raw
// [16]byte has no text encoding for a parameter of unknown type, and a
// uuid.UUID goes through driver.Valuer and text in every mode: about 30
// times slower than pgtype.UUID in binary, with 19 allocations per value.
//
// Scanning needs nothing of the kind: pgx scans a uuid column into a
// [16]byte (or a uuid.UUID) from binary and from text results alike.
package pgvalue
