package emitter

import (
	"errors"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// sendError classifies an error of the insert or COPY: a finished or
// aborted tx is reported like a nil one (matching ErrInvalidInput and
// ErrTxDone, never ErrInvalidEvent: the events may be fine); a missing
// table matches outbox.ErrMissingTable and says how to create it; a
// caller-set ID already in the table matches outbox.ErrDuplicateID and
// names the ID. Anything else is wrapped as is.
func (e *Emitter) sendError(err error) error {
	if txErr := pgerr.TxUnusable(err); txErr != nil {
		return txErr
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return errtext.Wrap(err, "emit into %s", e.names.Table)
	}
	switch {
	case pgErr.Code == pgerr.UndefinedTable:
		return errtext.WrapHint(errtext.Because(outbox.ErrMissingTable, err), e.migrateHint(), "emit into %s", e.names.Table)
	case pgErr.Code == pgerr.UniqueViolation && pgErr.SchemaName == e.names.Table.Schema &&
		pgErr.ConstraintName == e.names.Object(sqlname.SuffixPkey):
		return errtext.Wrap(errtext.Because(outbox.ErrDuplicateID, err), "emit into %s: event %s", e.names.Table, duplicateID(pgErr.Detail))
	}
	return errtext.Wrap(err, "emit into %s", e.names.Table)
}

// migrateHint says how to create the emitter's table.
func (e *Emitter) migrateHint() string {
	return "create it with migrations.Migrate, or: outboxctl migrate -schema " + e.names.Table.Schema +
		" -table " + e.names.Table.Name
}

// keyDetail finds the key value in a unique violation's detail:
// `Key (id)=(0190…) already exists.`
var keyDetail = regexp.MustCompile(`\(id\)=\(([0-9a-f-]{36})\)`)

// duplicateID returns the ID a unique violation's detail names, or
// "(ID not reported)" when the server left it out.
func duplicateID(detail string) string {
	if m := keyDetail.FindStringSubmatch(detail); m != nil {
		if id, err := uuid.Parse(m[1]); err == nil {
			return id.String()
		}
	}
	return "(ID not reported)"
}
