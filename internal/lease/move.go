package lease

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// This file builds the moves of schema version 10: an outcome that ends
// an event's life in the outbox table (SENT with history on, FAILED)
// deletes its row there and inserts it into the SENT history or the dead
// letters, in one statement (see the package doc, "Tables").

// deleted is a data-modifying CTE named name that deletes the rows of
// table (alias o) matching where, joined to using when not empty, and
// returns each of sqlname.Columns as the row it moves must have it: the
// expression of set when the column has one there (evaluated on the
// deleted row and using, as an UPDATE's SET would be), else the deleted
// row's value.
func deleted(name, table, using, where string, set map[string]string) string {
	cols := make([]string, len(sqlname.Columns))
	for i, c := range sqlname.Columns {
		expr, ok := set[c]
		if !ok {
			expr = "o." + c
		}
		cols[i] = expr + " AS " + c
	}
	if using != "" {
		using = "\n\tUSING " + using
	}
	return fmt.Sprintf(`%[1]s AS (
	DELETE FROM %[2]s AS o%[3]s
	WHERE %[4]s
	RETURNING %[5]s
)`, name, table, using, where, strings.Join(cols, ", "))
}

// inserted is a data-modifying CTE named name that inserts the rows of
// the CTE from (see deleted) into table and returns returning of them.
func inserted(name, table, from, returning string) string {
	cols := strings.Join(sqlname.Columns, ", ")
	return fmt.Sprintf(`%[1]s AS (
	INSERT INTO %[2]s (%[4]s)
	SELECT %[4]s FROM %[3]s
	RETURNING %[5]s
)`, name, table, from, cols, returning)
}

// deadInserted is inserted into the dead letters, replacing the dead
// letter of the same id (sqlname.ReplaceDead): failing instead would
// fail every batch that holds the row, a final failure's batch and each
// recovery pass, which takes the oldest expired leases first and so
// would stop recovering any lease.
func deadInserted(name, table, from, returning string) string {
	ins := inserted(name, table, from, returning)
	at := strings.LastIndex(ins, "\n\tRETURNING ")
	return ins[:at] + "\n\t" + sqlname.ReplaceDead + ins[at:]
}

// leaseEnded are the columns a move clears or sets, like recorded does
// in place, for a row that leaves PROCESSING with an outcome of its
// claim: the lease ends, lock_token stays, outcome_token is the claim's
// token.
func leaseEnded() map[string]string {
	return map[string]string{"lease_until": "NULL::timestamptz", "heartbeat_at": "NULL::timestamptz", "outcome_token": "o.lock_token"}
}

// with returns set with the entries of more added.
func with(set map[string]string, more map[string]string) map[string]string {
	for k, v := range more {
		set[k] = v
	}
	return set
}
