// Package pgtext holds the one rule for strings that go into PostgreSQL
// text columns and NOTIFY channels: bounded in bytes, valid UTF-8 and free
// of NUL (which text cannot hold). The emitter, the inbox, admin's filters
// and the dispatcher's configuration all check their strings with it.
// Strings that also travel as broker headers follow the header rule of
// package outbox as well (outbox.HeaderProblem).
package pgtext
