package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/migrations"
)

// benchDB is one run's own database and a pool on it.
type benchDB struct {
	admin string // URL of the database the run's database was created from
	name  string
	pool  *pgxpool.Pool
	trips *roundTrips // what the pool sent
	// keyOrder migrates with migrations.Config.KeyOrder: the order index
	// that a dispatcher with Ordering PerKey needs (-ordered).
	keyOrder bool
}

// openDB creates a fresh database pgoutbox_bench_<ts> and a pool of
// maxConns connections on it. Close drops it.
func openDB(ctx context.Context, adminURL string, maxConns int) (*benchDB, error) {
	name := fmt.Sprintf("pgoutbox_bench_%d", time.Now().UnixNano())
	if err := adminExec(ctx, adminURL, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = int32(max(maxConns, 2))
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = adminExec(ctx, adminURL, "DROP DATABASE "+name)
		return nil, err
	}
	return &benchDB{admin: adminURL, name: name, pool: pool, trips: trips}, nil
}

// warm opens n of the pool's connections at once, so that a run does not
// measure connections being made (a TLS handshake each, by default on
// loopback too): at the start of a latency run, 32 writers and the
// dispatcher opening theirs held every claim up for about a second.
func (db *benchDB) warm(ctx context.Context, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := db.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// Close closes the pool and drops the database, whatever ctx says.
func (db *benchDB) Close() {
	db.pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = adminExec(ctx, db.admin, "DROP DATABASE IF EXISTS "+db.name+" WITH (FORCE)")
}

// connConfig is a connection config for the run's database.
func (db *benchDB) connConfig() *pgx.ConnConfig {
	cfg := db.pool.Config().ConnConfig.Copy()
	cfg.Tracer = nil
	return cfg
}

// migrate creates the pgoutbox outbox table (with its order index when
// db.keyOrder), the minimal outbox (minimalDDL) and a business table
// "orders".
func (db *benchDB) migrate(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, db.connConfig())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	if err := migrations.Migrate(ctx, conn, migrations.Config{KeyOrder: db.keyOrder}); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, amount int NOT NULL, note text);`+minimalDDL)
	return err
}

// count runs a count query and returns its value.
func (db *benchDB) count(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// verify sets r.Verified when the count query returns want (and r counted
// want events), and returns r with the mismatch as the error.
func (r Result) verify(ctx context.Context, db *benchDB, want int, sql string) (Result, error) {
	err := db.expect(ctx, want, sql)
	if err == nil && r.N != want {
		err = fmt.Errorf("verify: the run counted %d events, want %d", r.N, want)
	}
	r.Verified = err == nil
	return r, err
}

// sentSQL counts pgoutbox's sent events wherever the schema keeps them:
// SENT rows in outbox_events (schema version 9 and older, and strays an
// old dispatcher leaves) and the rows of the SENT history table
// outbox_events_sent (schema version 10 on).
const sentSQL = `SELECT (SELECT count(*) FROM outbox_events WHERE status = 'SENT') + (SELECT count(*) FROM outbox_events_sent)`

// verifySent verifies a pgoutbox drain of want events: each is SENT
// (sentSQL), or, with deleted (DeleteSent), gone from every table.
func (r Result) verifySent(ctx context.Context, db *benchDB, want int, deleted bool) (Result, error) {
	if !deleted {
		return r.verify(ctx, db, want, sentSQL)
	}
	return r.verifyGone(ctx, db, want, `SELECT (SELECT count(*) FROM outbox_events) + (SELECT count(*) FROM outbox_events_sent)`)
}

// verifyGone sets r.Verified when r counted want events and the count
// query (of the rows left where they were) returns 0: a drain whose
// completions delete.
func (r Result) verifyGone(ctx context.Context, db *benchDB, want int, sql string) (Result, error) {
	err := db.expect(ctx, 0, sql)
	if err == nil && r.N != want {
		err = fmt.Errorf("verify: the run counted %d events, want %d", r.N, want)
	}
	r.Verified = err == nil
	return r, err
}

// backlogDB opens a migrated database holding o.N due PENDING events in
// outbox_events.
func backlogDB(ctx context.Context, o Options, conns int) (*benchDB, error) {
	return backlogDBWith(ctx, o, conns, func(ctx context.Context, db *benchDB) error {
		return preload(ctx, db, o.N, o.Payload, o.Keys, o.Types)
	})
}

// backlogDBWith opens a migrated database and fills its backlog with fill.
func backlogDBWith(ctx context.Context, o Options, conns int, fill func(context.Context, *benchDB) error) (*benchDB, error) {
	db, err := openDB(ctx, o.URL, conns)
	if err != nil {
		return nil, err
	}
	db.keyOrder = o.Ordered
	if err = db.migrate(ctx); err == nil {
		err = fill(ctx, db)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// expect checks that a count query returns want.
func (db *benchDB) expect(ctx context.Context, want int, sql string, args ...any) error {
	n, err := db.count(ctx, sql, args...)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("verify: %q counted %d, want %d", sql, n, want)
	}
	return nil
}

func adminExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// payload returns n bytes of filler.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// openMigrated is openDB with the outbox migrated to the latest version.
func openMigrated(ctx context.Context, adminURL string, maxConns int) (*benchDB, error) {
	db, err := openDB(ctx, adminURL, maxConns)
	if err != nil {
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// openWarmed is openDB, migrate and warm: a fresh migrated database with
// conns connections of its pool open.
func openWarmed(ctx context.Context, adminURL string, conns int) (*benchDB, error) {
	db, err := openDB(ctx, adminURL, conns)
	if err != nil {
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.warm(ctx, conns); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}
