// Package pgtext holds the one rule for strings that go into PostgreSQL
// text columns, NOTIFY channels and broker metadata: bounded in bytes,
// valid UTF-8 and free of NUL (which text cannot hold). The emitter, the
// inbox and the dispatcher's configuration all check their strings with it.
package pgtext
