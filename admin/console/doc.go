// Package console is the outbox's operator console: an http.Handler
// that a service mounts in its own mux under a prefix (outboxctl serve
// runs it alone). It shows what admin reads, server-rendered with
// html/template from embedded templates and one small script, and lets
// an operator replay, skip and purge, each through admin and audited.
//
//	GET  /                    overview: counts by status and type, oldest due, activity of the
//	                          last minutes, failed by code, blocked keys, replicas, circuit state
//	GET  /fragments/overview  the overview's body; static/console.js swaps it in every 5 s
//	GET  /events              list with filter (status, type, key, code, from, to), its count,
//	                          keyset pages (after), bulk replay and purge forms
//	GET  /events/{id}         one event: envelope, headers, attempt log; ?payload=1 the payload
//	POST /actions/replay      replay by id or by the list's filter     (dry run, then confirm)
//	POST /actions/skip        skip FAILED heads by id                  (dry run, then confirm)
//	POST /actions/purge       purge SENT or FAILED older than an age    (dry run, then confirm)
//	GET  /done                what an action did (actions redirect here: a reload posts nothing)
//	GET  /audit               the audit log, newest first
//	GET  /static/...          console.css, console.js (embedded)
//
// # Security
//
//   - Read-only by default: without Config.AllowActions no action form is
//     rendered and every POST answers 403.
//   - Config.Authorize runs on every request; it is required with
//     actions, and the user it names is the audited Actor of each action
//     (admin writes the audit row in the action's own transaction).
//   - Every POST passes http.CrossOriginProtection and carries a CSRF
//     token (double submit: a random cookie, SameSite=Strict and
//     HttpOnly, and a form field holding the HMAC of that cookie and the
//     user under a key drawn by New), else 403.
//   - Every response sets a strict Content-Security-Policy (scripts and
//     styles from the console itself only, no inline script or style),
//     nosniff, no-referrer, no-store and DENY framing.
//   - Stored strings (types, keys, codes, headers, errors, payloads) are
//     escaped by html/template, invalid UTF-8 is shown as U+FFFD (a
//     payload that is not UTF-8 as hex), and long strings are cut with a
//     visible mark. The payload is shown only on request, 4 KiB at most,
//     inside a pre element, never as HTML.
//
// # Actions
//
// Each action posts twice. The dry run (dry=1, the default) changes
// nothing and answers a confirmation page with the number of events the
// action takes now; its form posts the same parameters with dry=0,
// expected=N and request, a random id that makes the confirmation single
// use (admin.Actor.RequestID): posted again, it changes nothing and
// answers 409 with a result page (#result) saying it was done already.
// A bulk replay then replays at most N (and at most
// admin.MaxReplayLimit) of the FAILED events the filter matches: a
// filter of type and code alone through admin's filter replay (the audit
// row records that filter), one with a key or a time range by the ids
// of the events the list finds (the audit row records the ids, and the
// filter under selected_by).
//
// A purge goes by status and age only (the list hides its form while any
// other filter is set). Its dry run fixes an absolute cut-off, now less
// the age, which the confirmation posts back as before (not later than
// now), so the confirmation acts on the set the page counted even when a
// history partition closes in between. FAILED: the dry run counts at
// most admin.DefaultPurgeLimit dead letters ("at least" when it reaches
// it) and the confirmation deletes at most N. SENT: the count is at most
// admin.DefaultPurgeLimit rows of the history's default partition plus
// the planner's estimate of the partitions due ("about"; "unknown" when
// 0, which may hide a partition never analyzed), and the confirmation
// deletes at most that many default-partition rows plus those partitions,
// whole (see admin.Admin.Purge).
//
// Redirects (the result page's, the ServeMux's for "/static" or a path
// that is not clean) stay under BasePath, which must be a clean absolute
// path.
//
// Without Authorize, anyone who reaches the handler reads the outbox
// (types, keys, errors, payloads on request): mount it behind the
// service's authentication, or give it an Authorize.
//
// Every query goes through admin, whose statements are index-served; the
// overview reads its parts one after the other, each failing alone.
package console
