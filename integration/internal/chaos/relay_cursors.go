package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// cursorLogSQL creates, in schema %[1]s, the cursor log chaos_cursor_log
// with a trigger on the log's cursor table %[2]s, and the tick copy
// chaos_ticks with a trigger on its ticks table %[3]s (filled with the
// ticks already there). Both write in the changing transaction: a rolled
// back move or tick leaves no entry. The cursor trigger logs a group's
// creation and drop, and every update that changes its ticks, batch,
// token, owner or stop reason; renewals alone are not logged.
const cursorLogSQL = `
CREATE TABLE %[1]s.chaos_cursor_log (
	n               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	op              text        NOT NULL,
	grp             text        NOT NULL,
	old_last_tick   bigint,
	new_last_tick   bigint,
	old_batch_tick  bigint,
	new_batch_tick  bigint,
	old_batch_seq   bigint,
	new_batch_seq   bigint,
	old_token       uuid,
	new_token       uuid,
	old_owner       text,
	new_owner       text,
	old_lease_until timestamptz,
	new_stopped     text,
	at              timestamptz NOT NULL,
	statement_at    timestamptz NOT NULL,
	xact_at         timestamptz NOT NULL DEFAULT now(),
	writer          text        NOT NULL
);
CREATE FUNCTION %[1]s.chaos_log_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s.chaos_cursor_log (op, grp, new_last_tick, new_batch_tick, new_batch_seq, new_token, new_owner,
			new_stopped, at, statement_at, writer)
		VALUES (TG_OP, NEW.grp, NEW.last_tick, NEW.batch_tick, NEW.batch_seq, NEW.token, NEW.owner,
			NEW.stopped_reason, clock_timestamp(), statement_timestamp(), current_setting('application_name'));
		RETURN NEW;
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO %[1]s.chaos_cursor_log (op, grp, old_last_tick, old_batch_tick, old_batch_seq, old_token, old_owner,
			old_lease_until, at, statement_at, writer)
		VALUES (TG_OP, OLD.grp, OLD.last_tick, OLD.batch_tick, OLD.batch_seq, OLD.token, OLD.owner,
			OLD.lease_until, clock_timestamp(), statement_timestamp(), current_setting('application_name'));
		RETURN OLD;
	END IF;
	INSERT INTO %[1]s.chaos_cursor_log (op, grp, old_last_tick, new_last_tick, old_batch_tick, new_batch_tick,
		old_batch_seq, new_batch_seq, old_token, new_token, old_owner, new_owner, old_lease_until, new_stopped,
		at, statement_at, writer)
	VALUES (TG_OP, NEW.grp, OLD.last_tick, NEW.last_tick, OLD.batch_tick, NEW.batch_tick,
		OLD.batch_seq, NEW.batch_seq, OLD.token, NEW.token, OLD.owner, NEW.owner, OLD.lease_until, NEW.stopped_reason,
		clock_timestamp(), statement_timestamp(), current_setting('application_name'));
	RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_cursor AFTER UPDATE ON %[2]s FOR EACH ROW
	WHEN ((OLD.last_tick, OLD.batch_tick, OLD.batch_seq, OLD.token, OLD.owner, OLD.stopped_reason)
		IS DISTINCT FROM (NEW.last_tick, NEW.batch_tick, NEW.batch_seq, NEW.token, NEW.owner, NEW.stopped_reason))
	EXECUTE FUNCTION %[1]s.chaos_log_cursor();
CREATE TRIGGER chaos_log_cursor_life AFTER INSERT OR DELETE ON %[2]s FOR EACH ROW
	EXECUTE FUNCTION %[1]s.chaos_log_cursor();
CREATE TABLE %[1]s.chaos_ticks (
	tick_id  bigint NOT NULL PRIMARY KEY,
	snapshot text   NOT NULL
);
CREATE FUNCTION %[1]s.chaos_copy_tick() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO %[1]s.chaos_ticks (tick_id, snapshot) VALUES (NEW.tick_id, NEW.snapshot::text);
	RETURN NEW;
END $$;
CREATE TRIGGER chaos_copy_tick AFTER INSERT ON %[3]s FOR EACH ROW EXECUTE FUNCTION %[1]s.chaos_copy_tick();
INSERT INTO %[1]s.chaos_ticks (tick_id, snapshot) SELECT tick_id, snapshot::text FROM %[3]s;
`

// InstallCursorLog creates, in schema (the scenario's own, which may be
// the log's), the cursor log of the log table (see CursorEntry) and the
// copy of its ticks (see TickRecord), which retention does not delete.
// Sessions should set application_name to the replica's name (the
// entries' Writer); the relay's Config.Owner must be that name too, since
// the checker finds a delivery's token through the owner of the takes.
// One log per schema.
func InstallCursorLog(ctx context.Context, pool *pgxpool.Pool, schema string, log outbox.Table) error {
	n, err := sqlname.For(log)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, fmt.Sprintf(cursorLogSQL, pgx.Identifier{schema}.Sanitize(),
		n.Log(sqlname.SuffixCursors), n.Log(sqlname.SuffixTicks)))
	return err
}

// ReadCursorLog returns the cursor log of schema, in the order it was
// written.
func ReadCursorLog(ctx context.Context, pool *pgxpool.Pool, schema string) ([]CursorEntry, error) {
	rows, err := pool.Query(ctx, `SELECT op, grp, coalesce(old_last_tick, 0), coalesce(new_last_tick, 0),
		coalesce(old_batch_tick, 0), coalesce(new_batch_tick, 0), coalesce(old_batch_seq, 0), coalesce(new_batch_seq, 0),
		old_token, new_token, coalesce(old_owner, ''), coalesce(new_owner, ''), old_lease_until,
		coalesce(new_stopped, ''), at, statement_at, xact_at, writer
		FROM `+pgx.Identifier{schema, "chaos_cursor_log"}.Sanitize()+` ORDER BY n`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (CursorEntry, error) {
		var e CursorEntry
		var oldTok, newTok *uuid.UUID
		var lease *time.Time
		err := r.Scan(&e.Op, &e.Group, &e.OldLastTick, &e.NewLastTick, &e.OldBatchTick, &e.NewBatchTick,
			&e.OldBatchSeq, &e.NewBatchSeq, &oldTok, &newTok, &e.OldOwner, &e.NewOwner, &lease,
			&e.NewStopped, &e.At, &e.StatementAt, &e.XactAt, &e.Writer)
		if oldTok != nil {
			e.OldToken = *oldTok
		}
		if newTok != nil {
			e.NewToken = *newTok
		}
		if lease != nil {
			e.OldLeaseUntil = *lease
		}
		return e, err
	})
}

// ReadTicks returns the copy of the ticks kept in schema, by id.
func ReadTicks(ctx context.Context, pool *pgxpool.Pool, schema string) ([]TickRecord, error) {
	rows, err := pool.Query(ctx, `SELECT tick_id, snapshot FROM `+
		pgx.Identifier{schema, "chaos_ticks"}.Sanitize()+` ORDER BY tick_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TickRecord, error) {
		var t TickRecord
		return t, r.Scan(&t.ID, &t.Snapshot)
	})
}
