// Package stmtsize holds the adaptive size of the dispatcher's batch
// statements under a statement timeout: a statement the server ends for
// lack of time halves the size, and full statements grow it back slowly
// (Size). WriteRefs runs renewals and start marks in statements of that
// size and retries at once, smaller, when one times out.
//
// Its callers: each claim coordinator keeps a Size of claims
// (internal/claim/claims.go, starting at BatchSize), and the keeper
// (internal/keeper) keeps one Size of ref writes
// (lease.MaxRefsPerStatement) shared by its heartbeat's renewals and its
// start marks under its lease-writes mutex, which WriteRefs takes around
// each try. TimedOut is the one test of "the server
// ended this statement", which the claim path also uses to shrink its
// claims.
//
// A Size has no lock of its own: its owner calls it from one goroutine, or
// under the mutex it passes to WriteRefs.
package stmtsize
