package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// OnOutcomes makes every outcome the dispatcher writes for an event of
// the test's outbox run the trigger function fn (a plpgsql function
// returning trigger that the test created, reading NEW only, never OLD):
// an update of the outbox table that spends an attempt (a retry; before
// schema version 10 a success or a FAILED outcome too), an insert into
// the SENT history (a success moved there) and an insert into the dead
// letters other than a refused outcome's (code outcome_refused, which a
// refusing fn must let through). Claims, renewals, releases and recovery
// in place do not run it. fn raising refuses the outcome; fn sleeping
// slows it.
func (db *DB) OnOutcomes(tb testing.TB, fn string) {
	tb.Helper()
	f := pgx.Identifier{fn}.Sanitize()
	for _, stmt := range []string{
		`CREATE TRIGGER on_outcome BEFORE UPDATE ON outbox_events FOR EACH ROW
			WHEN (NEW.attempts > OLD.attempts) EXECUTE FUNCTION ` + f + `()`,
		`CREATE TRIGGER on_outcome BEFORE INSERT ON outbox_events_sent FOR EACH ROW EXECUTE FUNCTION ` + f + `()`,
		`CREATE TRIGGER on_outcome BEFORE INSERT ON outbox_events_dead FOR EACH ROW
			WHEN (NEW.last_error_code IS DISTINCT FROM 'outcome_refused') EXECUTE FUNCTION ` + f + `()`,
	} {
		if _, err := db.Pool.Exec(context.Background(), stmt); err != nil {
			tb.Fatalf("testdb: trigger on outcomes: %v", err)
		}
	}
}
