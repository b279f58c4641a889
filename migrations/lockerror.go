package migrations

import "github.com/pgoutbox/pgoutbox/internal/tmplmigrate"

// LockError is what [Migrate] and inbox.Migrate return when the advisory
// lock that serializes migrations stayed held by another session for
// longer than the configured wait ([Config].LockTimeout; inbox.Migrate
// always waits the default, one minute). It names the session that held
// it (Lock, Waited, PID, ApplicationName, ClientAddr, User, State), so an
// operator can tell a migration still running elsewhere from a lock left
// behind, for example by an idle server connection of a transaction-mode
// pooler that ran Migrate once; such a session is ended with
// SELECT pg_terminate_backend(PID). It unwraps to the database's
// lock_timeout error (SQLSTATE 55P03); its text contains no credentials.
//
// It is an alias: the migration runner that builds it, shared with the
// inbox, defines it, and this package imports that one.
type LockError = tmplmigrate.LockError
