package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Transition is one change of an outbox row's status, as the trigger the
// scenarios install (see InstallTransitionLog) logged it in the same
// transaction: the database's own record of who wrote what.
type Transition struct {
	ID                   uuid.UUID
	OldStatus, NewStatus string
	// OldToken and NewToken are lock_token before and after (uuid.Nil for
	// NULL). A claim sets NewToken; an outcome keeps the token.
	OldToken, NewToken uuid.UUID
	// OldLeaseUntil is lease_until before the change (zero for NULL).
	OldLeaseUntil time.Time
	// At is the database's clock_timestamp() when the row changed.
	At time.Time
	// StatementAt is the database's statement_timestamp() of the writing
	// statement: when it started, no later than its test of the lease.
	StatementAt time.Time
	// Writer is the application_name of the session that wrote it: the
	// replica's name.
	Writer string
}

// transitionLogSQL creates the table chaos_transitions in schema %[1]s
// and a trigger on the outbox table %[2]s that logs every change of a
// row's status into it, in the changing transaction: a rolled back change
// leaves no entry. A delete is logged too, as a change to the status
// Deleted keeping the token (DeleteSent deletes instead of writing SENT).
// Since schema version 10 a SENT or FAILED outcome moves its row: the
// statement deletes it from the outbox table and inserts it into the SENT
// history %[3]s or the dead letters %[4]s; a trigger on each turns the
// delete's entry of the same statement into the change to the status
// inserted, so that a move reads as the change it records (an insert
// without that delete is logged as a change from NOT_DELETED, which the
// checks report).
// It stamps the change with clock_timestamp() and with
// statement_timestamp(), the start of the writing statement, which is no
// later than that statement's own test of the lease (see fencing).
const transitionLogSQL = `
CREATE TABLE %[1]s.chaos_transitions (
	id              uuid        NOT NULL,
	old_status      text        NOT NULL,
	new_status      text        NOT NULL,
	old_token       uuid,
	new_token       uuid,
	old_lease_until timestamptz,
	at              timestamptz NOT NULL,
	statement_at    timestamptz NOT NULL,
	writer          text        NOT NULL,
	xact            bigint      NOT NULL DEFAULT txid_current()
);
CREATE FUNCTION %[1]s.chaos_log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO %[1]s.chaos_transitions (id, old_status, new_status, old_token, new_token, old_lease_until, at, statement_at, writer)
	VALUES (NEW.id, OLD.status, NEW.status, OLD.lock_token, NEW.lock_token, OLD.lease_until,
		clock_timestamp(), statement_timestamp(), current_setting('application_name'));
	RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_transition BEFORE UPDATE ON %[2]s
	FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
	EXECUTE FUNCTION %[1]s.chaos_log_transition();
CREATE FUNCTION %[1]s.chaos_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO %[1]s.chaos_transitions (id, old_status, new_status, old_token, new_token, old_lease_until, at, statement_at, writer)
	VALUES (OLD.id, OLD.status, 'DELETED', OLD.lock_token, OLD.lock_token, OLD.lease_until,
		clock_timestamp(), statement_timestamp(), current_setting('application_name'));
	RETURN OLD;
END $$;
CREATE TRIGGER chaos_log_delete BEFORE DELETE ON %[2]s
	FOR EACH ROW EXECUTE FUNCTION %[1]s.chaos_log_delete();
CREATE FUNCTION %[1]s.chaos_log_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE %[1]s.chaos_transitions SET new_status = NEW.status
	WHERE id = NEW.id AND new_status = 'DELETED' AND xact = txid_current() AND statement_at = statement_timestamp();
	IF NOT FOUND THEN -- not a move in one statement: the check reports a change from NOT_DELETED
		INSERT INTO %[1]s.chaos_transitions (id, old_status, new_status, old_token, new_token, old_lease_until, at, statement_at, writer)
		VALUES (NEW.id, 'NOT_DELETED', NEW.status, NULL, NEW.lock_token, NULL,
			clock_timestamp(), statement_timestamp(), current_setting('application_name'));
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_move BEFORE INSERT ON %[3]s
	FOR EACH ROW EXECUTE FUNCTION %[1]s.chaos_log_move();
CREATE TRIGGER chaos_log_move BEFORE INSERT ON %[4]s
	FOR EACH ROW EXECUTE FUNCTION %[1]s.chaos_log_move();
`

// InstallTransitionLog creates the transition log of the outbox table
// schema.table (see Transition), its SENT history and its dead letters.
// Sessions must set application_name to the replica's name: it is how the
// log tells who wrote a change.
func InstallTransitionLog(ctx context.Context, pool *pgxpool.Pool, schema, table string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(transitionLogSQL, pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema, table}.Sanitize(),
		pgx.Identifier{schema, table + "_sent"}.Sanitize(), pgx.Identifier{schema, table + "_dead"}.Sanitize()))
	return err
}

// ReadTransitions returns the transition log of schema, oldest first.
func ReadTransitions(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Transition, error) {
	rows, err := pool.Query(ctx, `SELECT id, old_status, new_status, old_token, new_token, old_lease_until, at, statement_at, writer
		FROM `+pgx.Identifier{schema, "chaos_transitions"}.Sanitize()+` ORDER BY at`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var t Transition
		var oldTok, newTok *uuid.UUID
		var lease *time.Time
		err := r.Scan(&t.ID, &t.OldStatus, &t.NewStatus, &oldTok, &newTok, &lease, &t.At, &t.StatementAt, &t.Writer)
		if oldTok != nil {
			t.OldToken = *oldTok
		}
		if newTok != nil {
			t.NewToken = *newTok
		}
		if lease != nil {
			t.OldLeaseUntil = *lease
		}
		return t, err
	})
}
