package emitter

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrDelayOnLog is the cause of the *outbox.ValidationError (Field
// "Delay") that Emit returns for an event with a Delay into a log
// (Config.Kind outbox.KindLog): the relay has no due times, it publishes
// events in commit order. It wraps [outbox.ErrInvalidEvent], as the
// ValidationError does: nothing was written and the transaction is still
// usable.
var ErrDelayOnLog = fmt.Errorf("%w: a log has no due times (Event.Delay must be zero)", outbox.ErrInvalidEvent)

// sendError classifies an error of the insert or COPY: a finished or
// aborted tx is reported like a nil one (matching ErrInvalidInput and
// ErrTxDone, never ErrInvalidEvent: the events may be fine); a missing
// outbox table matches outbox.ErrMissingTable and says how to create it
// (a missing table of a trigger's does not); a caller-set ID already in
// the table matches outbox.ErrDuplicateID and names the ID, from the
// server's detail or else from callerIDs, the IDs the call set. Every text
// keeps the database's message.
func (e *Emitter) sendError(err error, callerIDs []uuid.UUID) error {
	if txErr := pgerr.TxUnusable(err); txErr != nil {
		return txErr
	}
	var pgErr *pgconn.PgError
	switch {
	case pgerr.OwnMissingTable(err):
		return errtext.WrapHint(errtext.WrapAs(outbox.ErrMissingTable, err, ""), e.migrateHint(),
			"emit into %s", e.names.Table)
	case e.noPart(err):
		return errtext.WrapHint(err, "the log has no part for this transaction's id: the relay's ticker keeps parts ahead; add one with "+
			e.names.Object(sqlname.SuffixPartAdd)+"(xid8), and see migrations.Verify", "emit into %s", e.names.Table)
	case errors.As(err, &pgErr) && pgErr.Code == pgerr.UniqueViolation &&
		pgErr.SchemaName == e.names.Table.Schema && pgErr.ConstraintName == e.names.Object(sqlname.SuffixPkey):
		return errtext.Wrap(errtext.Because(outbox.ErrDuplicateID, err), "emit into %s: event %s",
			e.names.Table, duplicateID(pgErr.Detail, callerIDs))
	}
	return errtext.Wrap(err, "emit into %s", e.names.Table)
}

// checkViolation is the SQLSTATE of PostgreSQL's "no partition of
// relation ... found for row".
const checkViolation = "23514"

// noPart reports whether err is the log's refusal of a row whose xid no
// part holds (the parts ahead ran out).
func (e *Emitter) noPart(err error) bool {
	var pgErr *pgconn.PgError
	return e.cfg.Kind == outbox.KindLog && errors.As(err, &pgErr) && pgErr.Code == checkViolation &&
		pgErr.SchemaName == e.names.Table.Schema && pgErr.TableName == e.names.Table.Name &&
		strings.HasPrefix(pgErr.Message, "no partition of relation")
}

// migrateHint says how to create the emitter's table.
func (e *Emitter) migrateHint() string {
	if e.cfg.Kind == outbox.KindLog {
		return "create it with migrations.Migrate (Config.Kind outbox.KindLog)"
	}
	return "create it with migrations.Migrate, or: outboxctl migrate -schema " + e.names.Table.Schema +
		" -table " + e.names.Table.Name
}

// keyDetail finds the key value in a unique violation's detail:
// `Key (id)=(0190…) already exists.`
var keyDetail = regexp.MustCompile(`\(id\)=\(([0-9a-f-]{36})\)`)

// maxNamedIDs bounds the caller-set IDs a duplicate-ID error lists.
const maxNamedIDs = 3

// duplicateID names the ID of a unique violation: the one its detail
// names; else, when the server left the key out (a role without SELECT on
// the table), the caller-set ID when the call set one, or "one of" up to
// maxNamedIDs of them.
func duplicateID(detail string, callerIDs []uuid.UUID) string {
	if m := keyDetail.FindStringSubmatch(detail); m != nil {
		if id, err := uuid.Parse(m[1]); err == nil {
			return id.String()
		}
	}
	switch len(callerIDs) {
	case 0:
		return "(ID not reported)"
	case 1:
		return callerIDs[0].String()
	}
	names := make([]string, 0, maxNamedIDs+1)
	for i, id := range callerIDs {
		if i == maxNamedIDs {
			names = append(names, "…")
			break
		}
		names = append(names, id.String())
	}
	return "one of " + strings.Join(names, ", ")
}
