package retention

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// part is one retired part as <log>_part_truncate reports it.
type part struct {
	name      string
	lo        uint64
	truncated bool
	busy      bool
}

// truncate calls <log>_part_truncate: the parts every group is past,
// emptied unless busy.
func truncate(ctx context.Context, db DB, n sqlname.Names) ([]part, error) {
	rows, err := db.Query(ctx, `SELECT part, lo::text, truncated, busy FROM `+n.Function(sqlname.SuffixPartTruncate)+`()`)
	if err != nil {
		return nil, errtext.Wrap(err, "relay retention: truncate the retired parts of %s", n.Qualified)
	}
	var parts []part
	var lo string
	var p part
	_, err = pgx.ForEachRow(rows, []any{&p.name, &lo, &p.truncated, &p.busy}, func() error {
		v, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return fmt.Errorf("part %s: bound %q: %w", p.name, lo, err)
		}
		p.lo = v
		parts = append(parts, p)
		return nil
	})
	return parts, errtext.Wrap(err, "relay retention: truncate the retired parts of %s", n.Qualified)
}

// trimTicks calls <log>_tick_trim until a call deletes fewer than batch
// ticks, and returns how many were deleted.
func trimTicks(ctx context.Context, db DB, n sqlname.Names, batch int) (int64, error) {
	var total int64
	for {
		var got int64
		err := db.QueryRow(ctx, `SELECT `+n.Function(sqlname.SuffixTickTrim)+`($1)`, batch).Scan(&got)
		if err != nil {
			return total, errtext.Wrap(err, "relay retention: delete the old ticks of %s", n.Qualified)
		}
		total += got
		if got < int64(batch) {
			return total, nil
		}
	}
}

// ownsLog reports whether the current role owns the log (is a member of
// its owner), which DETACH and DROP need.
func ownsLog(ctx context.Context, db DB, n sqlname.Names) (bool, error) {
	var owns bool
	err := db.QueryRow(ctx, `SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = $1::regclass`,
		n.Qualified).Scan(&owns)
	return owns, errtext.Wrap(err, "relay retention: owner of %s", n.Qualified)
}

// currentPartLo is the lower bound of the part the next transaction id
// routes to: nothing at or above it is ever dropped.
func currentPartLo(ctx context.Context, db DB) (uint64, error) {
	var xmax string
	if err := db.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&xmax); err != nil {
		return 0, errtext.Wrap(err, "relay retention: current transaction id")
	}
	v, err := strconv.ParseUint(xmax, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("relay retention: current transaction id %q: %w", xmax, err)
	}
	return v / sqlname.LogPartXids * sqlname.LogPartXids, nil
}

// dropPart detaches the empty part from the log (CONCURRENTLY: writers
// and readers of the log are not blocked; it waits for the transactions
// that use the log) and drops it. A detach an earlier pass left pending
// is finished first. Each statement runs on its own (autocommit), which
// DETACH CONCURRENTLY needs. dropped is false when the part is not empty
// (never expected: it is left alone).
func dropPart(ctx context.Context, db DB, n sqlname.Names, name string) (dropped bool, err error) {
	q := pgx.Identifier{n.Table.Schema, name}.Sanitize()
	var attached, pending bool
	err = db.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(inhdetachpending), false)
		FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = $2::regclass`, q, n.Qualified).Scan(&attached, &pending)
	if err != nil {
		return false, errtext.Wrap(err, "relay retention: find part %s", q)
	}
	switch {
	case pending:
		_, err = db.Exec(ctx, `ALTER TABLE `+n.Qualified+` DETACH PARTITION `+q+` FINALIZE`)
	case attached:
		_, err = db.Exec(ctx, `ALTER TABLE `+n.Qualified+` DETACH PARTITION `+q+` CONCURRENTLY`)
	}
	if err != nil {
		return false, errtext.Wrap(err, "relay retention: detach part %s", q)
	}
	var full bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+q+`)`).Scan(&full); err != nil {
		return false, errtext.Wrap(err, "relay retention: check part %s is empty", q)
	}
	if full {
		return false, nil
	}
	_, err = db.Exec(ctx, `DROP TABLE `+q)
	return err == nil, errtext.Wrap(err, "relay retention: drop part %s", q)
}

// isPart reports whether name is a part name of the log (Names.LogPart's
// form): a guard before a DROP.
func isPart(n sqlname.Names, name string, lo uint64) bool {
	return strings.HasPrefix(name, n.Table.Name+sqlname.SuffixLogPart) && name == n.LogPart(lo)
}
