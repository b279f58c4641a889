package lease

import (
	"cmp"
	"fmt"
	"slices"
)

// This file holds the ordered claim (ClaimParams.Ordered): the claim that
// takes, per order key, only a run of the key's blockers starting at its
// head. See the package doc, "Ordered claim", for why each part is there.

// keyOf is the order key of the row named alias: PartitionKey, else
// AggregateID (Emit stores ” as NULL), as the order index has it.
func keyOf(alias string) string {
	return `coalesce(` + alias + `.partition_key, ` + alias + `.aggregate_id)`
}

// keyIs is true for the rows of alias whose order key is key, written as
// a range of one value rather than an equality so that the planner cannot
// treat the key as a constant, drop it from "ORDER BY key, seq" and
// answer the probe from the seq index (schema version 9; by a sequential
// scan and a sort when no index gives seq order) with a filter instead of
// the order index: it did, on a table whose statistics said most rows had that key,
// reading 30,000 rows of other states per probe (45,000 buffers). For
// text with the database's collation (deterministic), key <= x AND key >=
// x holds exactly when key = x.
func keyIs(alias, key string) string {
	return keyOf(alias) + ` >= ` + key + ` AND ` + keyOf(alias) + ` <= ` + key
}

// blocker is true for a row of alias that blocks its key: not SENT (the
// order index's predicate, written as the index has it so that the index
// serves the probe), and not FAILED unless blockFailed and the row was
// not skipped by an operator.
func blocker(alias string, blockFailed bool) string {
	failed := alias + `.status <> 'FAILED'`
	if blockFailed {
		failed = `(` + alias + `.status <> 'FAILED' OR ` + alias + `.skipped_at IS NULL)`
	}
	return alias + `.status <> 'SENT' AND ` + failed
}

// scope is what a run is ordered within: the order key alone, or with
// byType the order key and the event type (ClaimParams.ByType). Under
// byType every "key" of the statements below is the pair: the CTEs carry
// the type as column t beside the key k, and each probe of the order
// index for a key's rows also filters on the type (the index has no type:
// the probe reads the key's entries of other types on its way, see the
// package doc).
type scope struct{ byType bool }

// cols is the key column list of the CTE named alias: "alias.k", or
// "alias.k, alias.t".
func (s scope) cols(alias string) string {
	if s.byType {
		return alias + `.k, ` + alias + `.t`
	}
	return alias + `.k`
}

// sel selects the key of the table row named alias as k (and its type as
// t).
func (s scope) sel(alias string) string {
	if s.byType {
		return keyOf(alias) + ` AS k, ` + alias + `.event_type AS t`
	}
	return keyOf(alias) + ` AS k`
}

// same is true when the CTE rows a and b have the same key (and type).
func (s scope) same(a, b string) string {
	if s.byType {
		return a + `.k = ` + b + `.k AND ` + a + `.t = ` + b + `.t`
	}
	return a + `.k = ` + b + `.k`
}

// is is true for the table rows named alias whose key is key (and, by
// type, whose type is typ): SQL expressions.
func (s scope) is(alias, key, typ string) string {
	if s.byType {
		return keyIs(alias, key) + ` AND ` + alias + `.event_type = ` + typ
	}
	return keyIs(alias, key)
}

// headOK is true when the head of key (an SQL expression; by type, of
// key and typ), its blocker with the lowest seq found by one probe of the
// order index, is a due PENDING row, and in the typed form (typesParam >
// 0, the position of the types array) of a claimed type: a head that only
// another dispatcher takes ends the run before it starts, so its key is
// blocked for this claim and its rows must not take the claim's limit.
// Under blockFailed a dead letter of the key that no operator skipped
// blocks it too: the head is found in the outbox table, then a probe of
// the dead order index (dead) looks for such a row with a lower seq.
func headOK(t, dead, key, typ string, sc scope, blockFailed bool, typesParam int) string {
	deadFirst := ``
	if blockFailed {
		deadFirst = ` AND NOT ` + deadBefore(dead, key, typ, sc, `h.seq`)
	}
	return fmt.Sprintf(`(SELECT h.status = 'PENDING' AND h.next_attempt_at <= now()%[6]s%[7]s FROM %[1]s AS h
		WHERE %[5]s AND %[4]s
		ORDER BY %[3]s, h.seq LIMIT 1)`, t, key, keyOf("h"), blocker("h", blockFailed), sc.is("h", key, typ), ofTypes("h", typesParam), deadFirst)
}

// deadBefore is true when the dead letters (dead) hold a row of key (by
// type: and typ) that no operator skipped with a seq lower than seq.
// Dead letters keep the seq they had in the outbox table, so seq orders
// the two tables' rows of a key as one. It compares with deadHead, a
// scalar subquery, rather than testing EXISTS: the planner turned that
// into an anti join that read the whole dead letters table once per
// claim.
func deadBefore(dead, key, typ string, sc scope, seq string) string {
	return `coalesce(` + deadHead(dead, key, typ, sc) + ` < ` + seq + `, false)`
}

// deadHead is the seq of the first dead letter of key (by type: and typ)
// that no operator skipped, NULL when there is none: one probe of the
// dead order index.
func deadHead(dead, key, typ string, sc scope) string {
	return fmt.Sprintf(`(SELECT dh.seq FROM %[1]s AS dh WHERE %[2]s AND dh.skipped_at IS NULL ORDER BY %[3]s, dh.seq LIMIT 1)`,
		dead, sc.is("dh", key, typ), keyOf("dh"))
}

// heads probes, once per key, the heads of the keys of the rows of window
// (columns k and, by type, t), the first $1 due PENDING rows in due
// order: the CTE "heads" (k, t, ok) that headDue reads.
func heads(t, dead, window string, sc scope, blockFailed bool, typesParam int) string {
	return fmt.Sprintf(`heads AS MATERIALIZED (
	SELECT %[3]s, %[2]s AS ok FROM (
		SELECT DISTINCT %[3]s FROM (%[1]s) AS w WHERE w.k IS NOT NULL
	) AS w
)`, window, headOK(t, dead, "w.k", "w.t", sc, blockFailed, typesParam), sc.cols("w"))
}

// headDue is the candidate filter of the ordered claim on the row named
// alias: the row has no key, or the head of its key is a due PENDING row.
// It keeps the rows of blocked keys from taking the claim's LIMIT. The
// heads of the keys of the first rows in due order are probed once each
// (see heads) and looked up in a hashed set; only a row of another key
// probes its own, so that the rows of one key do not each walk the
// key's entries from its start.
func headDue(t, dead, alias string, sc scope, blockFailed bool, typesParam int) string {
	row, cols := keyOf(alias), `k`
	if sc.byType {
		row, cols = `(`+keyOf(alias)+`, `+alias+`.event_type)`, `k, t`
	}
	return fmt.Sprintf(`(%[1]s IS NULL OR %[3]s IN (SELECT %[4]s FROM heads WHERE ok)
		OR (NOT %[3]s IN (SELECT %[4]s FROM heads) AND %[2]s))`, keyOf(alias),
		headOK(t, dead, keyOf(alias), alias+`.event_type`, sc, blockFailed, typesParam), row, cols)
}

// orderedDue locks, like allDue, up to $1 due PENDING rows in due order,
// of every type or (typesParam > 0) of the types $typesParam, skipping
// rows locked elsewhere, but only candidates (headDue), and returns what
// the runs need of each. Typed, the window and the locking read filter
// the same walk of the due index on the type, as the unordered claim
// does.
func orderedDue(t, dead string, sc scope, blockFailed bool, typesParam int) string {
	window := fmt.Sprintf(`SELECT %[2]s FROM %[1]s AS w
		WHERE w.status = 'PENDING' AND w.next_attempt_at <= now()%[3]s
		ORDER BY w.next_attempt_at, w.seq LIMIT $1`, t, sc.sel("w"), ofTypes("w", typesParam))
	return heads(t, dead, window, sc, blockFailed, typesParam) + fmt.Sprintf(`, due AS MATERIALIZED (
	SELECT c.id, %[2]s, c.seq, c.next_attempt_at FROM %[1]s AS c
	WHERE c.status = 'PENDING' AND c.next_attempt_at <= now()%[4]s AND %[3]s
	ORDER BY c.next_attempt_at, c.seq
	LIMIT $1
	FOR UPDATE OF c SKIP LOCKED
)`, t, sc.sel("c"), headDue(t, dead, "c", sc, blockFailed, typesParam), ofTypes("c", typesParam))
}

// barriers is the CTE "barriers" of the ordered claim: for each key (by
// type: key and type) among the runs, the lowest seq of a walked row the
// claim does not hold and, under blockFailed, of a dead letter of the
// key that no operator skipped (one probe of the dead order index per
// key): the run ends before it.
func barriers(dead string, sc scope, blockFailed bool) string {
	if !blockFailed {
		return fmt.Sprintf(`barriers AS MATERIALIZED (
	SELECT %[1]s, min(m.seq) AS seq FROM mine AS m WHERE NOT m.mine GROUP BY %[1]s
)`, sc.cols("m"))
	}
	return fmt.Sprintf(`barriers AS MATERIALIZED (
	SELECT %[1]s, min(b.seq) AS seq FROM (
		SELECT %[2]s, m.seq FROM mine AS m WHERE NOT m.mine
		UNION ALL
		SELECT %[3]s, %[4]s FROM runs AS r
	) AS b GROUP BY %[1]s
)`, sc.cols("b"), sc.cols("m"), sc.cols("r"), deadHead(dead, "r.k", "r.t", sc))
}

// orderedClaimSQL is the ordered claim statement with the given started_at
// expression, taking its candidates from the CTE due (orderedDue, which
// defines "due" and what it reads; typesParam is the position of the
// types array in the typed form, else 0). For each key (by type: key and
// type) among the locked candidates, it walks the key's blockers in seq
// order (the order index) for one more than it locked of that key, locks
// the walked rows that are due PENDING (of the claimed types) and were not
// locked yet, skipping rows locked elsewhere, and takes the walked rows
// before the first one it does not hold, and (blockFailed) before the
// key's first dead letter that no operator skipped (see barriers): a
// prefix of the key's blockers, from its head. Rows of the key beyond
// the walk are not taken. Keys come in the due order of their first
// candidate, keyless rows in their own, each key's rows in seq order,
// up to $1 rows: a run cut by the limit keeps its prefix. It returns the
// order key of each row after claimedColumns.
func orderedClaimSQL(t, dead, startedAt, due string, sc scope, blockFailed bool, typesParam int) string {
	keyless := `'' AS k`
	if sc.byType {
		keyless = `'' AS k, '' AS t`
	}
	return fmt.Sprintf(`WITH %[4]s, runs AS MATERIALIZED (
	SELECT %[10]s, count(*) AS n, min(d.next_attempt_at) AS first_due FROM due AS d WHERE d.k IS NOT NULL GROUP BY %[10]s
), walk AS MATERIALIZED (
	SELECT %[11]s, r.first_due, w.id, w.seq, w.ready, EXISTS (SELECT 1 FROM due AS d WHERE d.id = w.id) AS held
	FROM runs AS r CROSS JOIN LATERAL (
		SELECT x.id, x.seq, x.status = 'PENDING' AND x.next_attempt_at <= now()%[8]s AS ready FROM %[1]s AS x
		WHERE %[9]s AND %[6]s
		ORDER BY %[5]s, x.seq LIMIT r.n + 1
	) AS w
), extra AS MATERIALIZED (
	SELECT o.id FROM %[1]s AS o
	WHERE o.id = ANY (ARRAY(SELECT id FROM walk WHERE ready AND NOT held))
		AND o.status = 'PENDING' AND o.next_attempt_at <= now()
	FOR UPDATE OF o SKIP LOCKED
), mine AS MATERIALIZED (
	SELECT %[12]s, w.first_due, w.id, w.seq, w.held OR EXISTS (SELECT 1 FROM extra AS e WHERE e.id = w.id) AS mine
	FROM walk AS w
), %[17]s, ids AS MATERIALIZED (
	SELECT ARRAY(SELECT id FROM (
		SELECT d.id, d.next_attempt_at AS first_due, %[14]s, d.seq FROM due AS d WHERE d.k IS NULL
		UNION ALL
		SELECT m.id, m.first_due, %[13]s, m.seq FROM mine AS m LEFT JOIN barriers AS b ON %[15]s
		WHERE m.mine AND (b.seq IS NULL OR m.seq < b.seq)
	) AS r ORDER BY r.first_due, %[16]s, r.seq LIMIT $1) AS a
)
UPDATE %[1]s AS o
SET status = 'PROCESSING', lock_token = $2, lock_owner = $3, locked_at = now(), heartbeat_at = now(),
	lease_until = now() + $4::bigint * interval '1 microsecond',
	started_at = %[3]s
WHERE o.id = ANY ((SELECT a FROM ids)::uuid[])
RETURNING %[2]s, %[7]s`, t, claimedColumns, startedAt, due, keyOf("x"), blocker("x", blockFailed), keyOf("o"), ofTypes("x", typesParam),
		sc.is("x", "r.k", "r.t"), sc.cols("d"), sc.cols("r"), sc.cols("w"), sc.cols("m"), keyless, sc.same("b", "m"), sc.cols("r"),
		barriers(dead, sc, blockFailed))
}

// orderedForms are the three forms of the ordered claim from one source
// of due rows, one set per head policy and scope (index: BlockFailed,
// then ByType).
type orderedForms [2][2]claimForms

// buildOrdered builds the ordered claims of every type or (typed) of
// the types in the text array after the started count ($5, or $6 in the
// claimSome form).
func buildOrdered(t, dead string, typed bool) orderedForms {
	var f orderedForms
	types := func(param int) int {
		if typed {
			return param
		}
		return 0
	}
	for i, bf := range []bool{false, true} {
		for j, sc := range []scope{{}, {byType: true}} {
			form := func(startedAt string, param int) string {
				return orderedClaimSQL(t, dead, startedAt, orderedDue(t, dead, sc, bf, types(param)), sc, bf, types(param))
			}
			f[i][j] = claimForms{none: form(startNone, 5), all: form(startAll, 5), some: form(startSome, 6)}
		}
	}
	return f
}

// forms returns the forms of the head policy and scope.
func (f *orderedForms) forms(blockFailed, byType bool) claimForms {
	return f[boolIndex(blockFailed)][boolIndex(byType)]
}

// boolIndex is 1 for true, 0 for false.
func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inKeyOrder reorders rows, already in claim order, so that the rows of
// each key (with byType, of each key and type) are in seq order: each key
// keeps the positions its rows took, and fills them in seq order. Due
// order and seq order differ within a key when an earlier event was
// retried and became due after a later one.
func inKeyOrder(rows []claimedRow, byType bool) {
	byKey := make(map[string][]int)
	for i, r := range rows {
		if r.key != "" {
			k := r.key
			if byType {
				k += "\x00" + r.event.Type
			}
			byKey[k] = append(byKey[k], i)
		}
	}
	for _, at := range byKey {
		run := make([]claimedRow, len(at))
		for j, i := range at {
			run[j] = rows[i]
		}
		slices.SortFunc(run, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
		for j, i := range at {
			rows[i] = run[j]
		}
	}
}

// nextHeadWindow bounds the PENDING rows, in due order, that
// orderedNextDueSQL looks at for a head.
const nextHeadWindow = 1000

// orderedNextDueSQL is NextDue for ordered claims: the wait until the
// earliest PENDING row that is the head of its key (by type: of its key
// and type) or has no key, of every type or (typed) of the types $1,
// among the first nextHeadWindow PENDING rows in due order (NULL when
// none of them is). A due row behind a blocked head is not work an
// ordered claim can take: counted, it woke a claim at every cooldown for
// as long as the key was blocked. The window is read from the due index,
// and the head of each of its keys is probed once (in the order index,
// and under blockFailed in the dead order index): a hot or blocked key's
// backlog costs at most the window, not a probe per row (a probe per row
// read 30,000 buffers for a key of 10,000 due rows, after every
// completion of an ordered dispatcher). A head beyond the window is found
// by the next poll, or by the next wake-up once the rows before it are
// claimed. Typed, the window is the rows of the types among the first
// nextHeadWindow entries of the due index and among the first
// nextHeadWindow of the rows not due yet (as typedNextDueSQL reads them),
// so that its cost does not depend on the types either.
func orderedNextDueSQL(t, dead string, typed bool, sc scope, blockFailed bool) string {
	walk := func(cond string) string {
		return fmt.Sprintf(`(SELECT c0.id, %[2]s AS k, c0.event_type AS t, c0.next_attempt_at FROM %[1]s AS c0
		WHERE c0.status = 'PENDING'%[3]s ORDER BY c0.next_attempt_at, c0.seq LIMIT %[4]d)`, t, keyOf("c0"), cond, nextHeadWindow)
	}
	window := `SELECT * FROM ` + walk(``) + ` AS c`
	if typed {
		window = `SELECT * FROM (` + walk(``) + `
		UNION ALL
		` + walk(` AND c0.next_attempt_at > now()`) + `) AS c WHERE c.t = ANY ($1::text[])`
	}
	deadFirst := ``
	if blockFailed {
		deadFirst = `
	WHERE NOT ` + deadBefore(dead, "d.k", "d.t", sc, "h.seq")
	}
	return nextDueSQL(fmt.Sprintf(`WITH w AS MATERIALIZED (
	%[2]s
), heads AS MATERIALIZED (
	SELECT %[6]s, h.id FROM (SELECT DISTINCT %[7]s FROM w WHERE w.k IS NOT NULL) AS d
	CROSS JOIN LATERAL (SELECT h.id, h.seq FROM %[1]s AS h WHERE %[3]s AND %[4]s ORDER BY %[5]s, h.seq LIMIT 1) AS h%[9]s
)
SELECT min(w.next_attempt_at) FROM w LEFT JOIN heads ON %[8]s WHERE w.k IS NULL OR heads.id = w.id`,
		t, window, sc.is("h", "d.k", "d.t"), blocker("h", blockFailed), keyOf("h"), sc.cols("d"), sc.cols("w"), sc.same("heads", "w"), deadFirst))
}
