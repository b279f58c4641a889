package tmplmigrate

import (
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// LockError is what migrations.Migrate and inbox.Migrate return
// when the advisory lock that serializes migrations stayed held by another
// session for longer than the configured wait (migrations.Config.LockTimeout;
// inbox.Migrate always waits the default, one minute).
// It names the session that held it, so an operator can tell a migration
// still running elsewhere from a lock left behind, for example by an idle
// server connection of a transaction-mode pooler that ran Migrate once.
// Such a session is ended with SELECT pg_terminate_backend(PID).
// Users meet it as migrations.LockError, an alias: it is defined here
// because Migrate builds it and package migrations imports this one.
type LockError struct {
	// Table is the table being migrated.
	Table outbox.Table
	// Lock names the advisory lock: "pgoutbox" for the lock keyed by the
	// table's name, "tern" for the one every tern migration in the database
	// takes.
	Lock string
	// Waited is how long Migrate waited for the lock.
	Waited time.Duration
	// PID is the process id of the backend that held the lock, or 0 when
	// it had released it by the time Migrate looked.
	PID int32
	// ApplicationName, ClientAddr (address:port; empty for a Unix socket),
	// User and State (for example "idle" or "active") describe that backend
	// as pg_stat_activity shows it. PostgreSQL shows ClientAddr and State
	// only to a superuser, a member of pg_read_all_stats, or the same role;
	// they are empty otherwise.
	ApplicationName string
	ClientAddr      string
	User            string
	State           string
	// Err is the database's lock_timeout error (SQLSTATE 55P03).
	Err error
}

// Error implements error. It names the holder and how to end it, and
// contains no credentials.
func (e *LockError) Error() string {
	msg := fmt.Sprintf("pgoutbox: migrate %s: the %s advisory lock was held by another session for %s", e.Table, e.Lock, e.Waited)
	if e.PID == 0 {
		return msg + " (released since; run Migrate again)"
	}
	return msg + fmt.Sprintf(": backend pid %d (application_name %q, client %q, user %q, state %q); "+
		"if it is not a migration in progress (an idle pooled connection keeps the lock), end it with "+
		"SELECT pg_terminate_backend(%d)", e.PID, e.ApplicationName, e.ClientAddr, e.User, e.State, e.PID)
}

// Unwrap returns the database's lock_timeout error.
func (e *LockError) Unwrap() error { return e.Err }
