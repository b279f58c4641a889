package lease

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/pguuid"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// refusedSQL records one held row FAILED with outbox.CodeOutcomeRefused:
// $1 is its id (an array of one, as fenced reads it), $2 its token, $3
// the message. It changes only the status, the error, the log, the lease
// and the outcome token (like every outcome); attempts stay as they are.
func refusedSQL(t string) string {
	return fmt.Sprintf(`UPDATE %[1]s AS o
SET status = 'FAILED', failed_at = now(), last_error_code = '%[2]s', last_error = left($3::text, 2048), %[3]s,
	attempt_log = %[4]s
WHERE %[5]s
RETURNING o.id`, t, outbox.CodeOutcomeRefused, recorded,
		appendLog(logEntry(`'failed'`, `'`+string(outbox.CodeOutcomeRefused)+`'`, `left($3::text, 512)`)), fenced)
}

// Refused records a held row whose outcome the database kept refusing as
// FAILED with code outcome_refused and message (bounded like every
// error text), fenced like every transition, in one statement. It is the
// write least likely to be refused in its place: an UPDATE (which every
// claim needs) of the status, the error and the lease only, spending no
// attempt, so that a missing DELETE privilege, or a trigger that refuses
// an attempt's outcome, lets it through. It reports whether the row was
// changed (false: no longer held under ref's token).
func (s *Store) Refused(ctx context.Context, db DB, ref Ref, message string) (bool, error) {
	tag, err := db.Exec(ctx, refusedSQL(s.qualified), pguuid.Array{pguuid.Of(ref.ID)}, pguuid.Of(ref.Token), CleanMessage(message))
	if err != nil {
		return false, fmt.Errorf("pgoutbox: record refused outcome: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
