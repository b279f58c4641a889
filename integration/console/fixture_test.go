package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// basePath is where the tests mount the console, as a service would
// under its own mux: links must keep it.
const basePath = "/outbox"

// operatorHeader carries the operator's name from the test's tab to the
// console's Authorize hook.
const operatorHeader = "X-Test-Operator"

// operator is the user the tabs of the tests with actions are.
const operator = "alice@browser-test"

// site is one test's outbox and its console, served over HTTP by a mux
// that mounts it under basePath.
type site struct {
	db    *pgtest.DB
	admin *admin.Admin
	// root is the console's URL, ending in basePath.
	root string
}

// serve migrates an outbox for the test (with the per-key order index,
// which the blocked keys read) and serves its console, read-only unless
// allowActions; with actions, Authorize allows the requests that name an
// operator in the X-Test-Operator header.
func serve(t *testing.T, allowActions bool) *site {
	t.Helper()
	browser(t) // without Chromium, skip before any database work
	db := pgtest.NewMigrated(t, testdb.KeyOrder)
	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	cfg := console.Config{Admin: a, AllowActions: allowActions, BasePath: basePath}
	if allowActions {
		cfg.Authorize = authorizeByHeader
	}
	h, err := console.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(basePath+"/", http.StripPrefix(basePath, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &site{db: db, admin: a, root: srv.URL + basePath}
}

// authorizeByHeader stands in for a service's authentication: the
// operator named in the X-Test-Operator header is allowed, a request
// without one is refused.
func authorizeByHeader(r *http.Request) (user string, allowed bool) {
	user = r.Header.Get(operatorHeader)
	return user, user != ""
}

// event is one row a test stores, in the table its status lives in: the
// outbox table (PENDING, PROCESSING), the dead letters (FAILED) or the
// SENT history.
type event struct {
	Status outbox.Status // PENDING when empty
	Type   string        // required
	Key    string        // partition_key, the order key; none when empty
	// Code is last_error_code: with it the row failed an attempt, and
	// has a last_error and, unless Log is set, one attempt in its log.
	Code        outbox.Code
	Error       string // last_error; a text naming Code when empty
	Owner       string // a PROCESSING row's lease owner; "replica-1" when empty
	Headers     map[string]string
	ContentType string
	Payload     []byte
	Log         []admin.AttemptLogEntry
	// Ago is how long before now() the row was created and due and,
	// SENT or FAILED, finished.
	Ago time.Duration
}

// seedSQL inserts one event into the table %s (the outbox table, its
// dead letters or its history), with a seq from the outbox table's
// identity, as the dispatcher's moves keep it.
const seedSQL = `INSERT INTO %s (id, seq, event_type, partition_key, content_type, payload, headers, status,
	attempts, lock_token, lock_owner, locked_at, lease_until, heartbeat_at,
	last_error_code, last_error, attempt_log, created_at, next_attempt_at, sent_at, failed_at)
OVERRIDING SYSTEM VALUE
VALUES ($1, nextval(pg_get_serial_sequence($2, 'seq')), $3, nullif($4::text, ''), nullif($5::text, ''), $6, $7, $8::text,
	$9, CASE WHEN $8 = 'PROCESSING' THEN gen_random_uuid() END,
	CASE WHEN $8 = 'PROCESSING' THEN $10::text END,
	CASE WHEN $8 = 'PROCESSING' THEN now() END,
	CASE WHEN $8 = 'PROCESSING' THEN now() + interval '1 hour' END,
	CASE WHEN $8 = 'PROCESSING' THEN now() END,
	nullif($11::text, ''), nullif($12::text, ''), $13,
	now() - $14::bigint * interval '1 microsecond', now() - $14::bigint * interval '1 microsecond',
	CASE WHEN $8 = 'SENT' THEN now() - $14::bigint * interval '1 microsecond' END,
	CASE WHEN $8 = 'FAILED' THEN now() - $14::bigint * interval '1 microsecond' END)`

// seed stores the events in the given order (their seq follows it) and
// returns their ids.
func (s *site) seed(t *testing.T, events ...event) []uuid.UUID {
	t.Helper()
	names, err := sqlname.For(s.db.Table())
	require.NoError(t, err)
	homes := map[outbox.Status]string{outbox.StatusSent: names.Sent, outbox.StatusFailed: names.Dead}
	batch := &pgx.Batch{}
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		ids[i] = uuid.Must(uuid.NewV7())
		if e.Status == "" {
			e.Status = outbox.StatusPending
		}
		home, ok := homes[e.Status]
		if !ok {
			home = names.Qualified
		}
		log, err := json.Marshal(e.attemptLog())
		require.NoError(t, err)
		headers := e.Headers
		if headers == nil {
			headers = map[string]string{}
		}
		batch.Queue(fmt.Sprintf(seedSQL, home), ids[i], names.Qualified, e.Type, e.Key, e.ContentType, e.Payload, headers,
			string(e.Status), e.attempts(), cmp.Or(e.Owner, "replica-1"), string(e.Code), e.lastError(), log,
			e.Ago.Microseconds())
	}
	require.NoError(t, s.db.Pool.SendBatch(testctx.New(t), batch).Close())
	return ids
}

// attemptLog is the row's attempt log: Log, else one attempt that ended
// with Code, else none.
func (e event) attemptLog() []admin.AttemptLogEntry {
	if e.Log != nil {
		return e.Log
	}
	if e.Code == "" {
		return []admin.AttemptLogEntry{} // an empty array, not null
	}
	outcome, at := "retry", time.Now().Add(-e.Ago)
	if e.Status == outbox.StatusFailed {
		outcome = "failed"
	}
	return []admin.AttemptLogEntry{{Attempt: 1, Outcome: outcome, Code: e.Code, Message: e.lastError(),
		Owner: "replica-1", Started: at.Add(-40 * time.Millisecond), Ended: at}}
}

// attempts is the row's spent attempts: those of its log, and the one
// that delivered a SENT row.
func (e event) attempts() int {
	n := len(e.attemptLog())
	if e.Status == outbox.StatusSent {
		n++
	}
	return n
}

// lastError is the row's last_error: Error, else a text naming Code.
func (e event) lastError() string {
	if e.Error != "" || e.Code == "" {
		return e.Error
	}
	return "delivery failed: " + string(e.Code)
}

// statusOf returns where the event id is now ("" when gone).
func (s *site) statusOf(t *testing.T, id uuid.UUID) outbox.Status {
	t.Helper()
	status, err := testdb.StatusOf(context.Background(), s.db.Pool, s.db.Table(), id)
	require.NoError(t, err)
	return outbox.Status(status)
}
