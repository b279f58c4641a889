package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// refusedSet are the columns a refused outcome writes: FAILED with
// outbox.CodeOutcomeRefused, $3 the message, the lease ended and the
// outcome token recorded (like every outcome); attempts stay as they
// are.
func refusedSet() map[string]string {
	return with(leaseEnded(), map[string]string{
		"status": `'FAILED'`, "failed_at": `now()`, "last_error_code": `'` + string(outbox.CodeOutcomeRefused) + `'`,
		"last_error":  `left($3::text, 2048)`,
		"attempt_log": appendLog(logEntry(`'failed'`, `'`+string(outbox.CodeOutcomeRefused)+`'`, `left($3::text, 512)`)),
	})
}

// refusedSQL moves one held row to the dead letters as refusedSet says:
// $1 is its id (an array of one, as fenced reads it), $2 its token, $3
// the message.
func refusedSQL(names sqlname.Names) string {
	return `WITH ` + deleted("m", names.Qualified, "", fenced, refusedSet()) + `, ` +
		deadInserted("moved", names.Dead, "m", "id") + `
SELECT id FROM moved`
}

// refusedInPlaceSQL writes the same as refusedSQL into the row where it
// is, an UPDATE of the status, the error, the log, the lease and the
// outcome token: a FAILED row left in the outbox table, a stray that the
// retention pass moves to the dead letters (purge.Sweep).
func refusedInPlaceSQL(t string) string {
	return fmt.Sprintf(`UPDATE %[1]s AS o
SET status = 'FAILED', failed_at = now(), last_error_code = '%[2]s', last_error = left($3::text, 2048), %[3]s,
	attempt_log = %[4]s
WHERE %[5]s
RETURNING o.id`, t, outbox.CodeOutcomeRefused, recorded,
		appendLog(logEntry(`'failed'`, `'`+string(outbox.CodeOutcomeRefused)+`'`, `left($3::text, 512)`)), fenced)
}

// Refused records a held row whose outcome the database kept refusing as
// FAILED with code outcome_refused and message (bounded like every
// error text), fenced like every transition, spending no attempt. It
// moves the row to the dead letters, in one statement; when the database
// refuses that too, it writes the same in place, in a second statement:
// the write least likely to be refused, an UPDATE (which every claim
// needs) of the status, the error and the lease only, so that a missing
// DELETE or INSERT privilege, or a trigger that refuses an attempt's
// outcome or a move, lets it through. The FAILED row it leaves in the
// outbox table is a stray that the retention pass moves (purge.Sweep).
// It reports whether the row was changed (false: no longer held under
// ref's token), and the error of the second statement when both failed.
func (s *Store) Refused(ctx context.Context, db DB, ref Ref, message string) (bool, error) {
	args := []any{pgvalue.UUIDArray{pgvalue.UUID(ref.ID)}, pgvalue.UUID(ref.Token), CleanMessage(message)}
	tag, err := db.Exec(ctx, refusedSQL(s.names), args...)
	if err == nil {
		return tag.RowsAffected() == 1, nil
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("pgoutbox: record refused outcome: %w", err)
	}
	tag, inPlace := db.Exec(ctx, refusedInPlaceSQL(s.names.Qualified), args...)
	if inPlace != nil {
		return false, fmt.Errorf("pgoutbox: record refused outcome: %w", errors.Join(err, inPlace))
	}
	return tag.RowsAffected() == 1, nil
}
