// Package pgcluster starts a PostgreSQL cluster of a test's own, for the
// fault-injection scenarios that must crash, restart or stop the server:
// never the shared test server, which other tests use at the same time.
//
// Start runs initdb into a temporary directory and pg_ctl start on a free
// loopback port (no Unix socket), as the OS user postgres when the test
// runs as root, since PostgreSQL refuses to run as root. The cluster can be
// stopped, started again and restarted with `pg_ctl restart -m immediate`
// (a crash and crash recovery) as often as a scenario likes; it is stopped
// and its files removed by the test's cleanup, also when the test fails.
// Without initdb the test is skipped with the reason.
//
// The server log (LogPath, ServerLog) is kept for the test to read: the
// scenarios count "deadlock detected" in it.
package pgcluster
