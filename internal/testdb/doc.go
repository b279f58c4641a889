// Package testdb gives every test its own schema in a real PostgreSQL, so
// tests run in parallel without seeing each other's rows. The database comes
// from PGOUTBOX_TEST_DATABASE_URL, or else from a PostgreSQL answering on
// 127.0.0.1:5432. Where neither exists the test fails (never skips) with a
// message saying how to provide one; `make test` starts one with
// testcontainers when Docker answers (see tools/cmd/withpg).
package testdb
