// Package console holds the operator console's browser tests: they drive
// the pages of admin/console in a real headless Chromium (through
// github.com/chromedp/chromedp) against a real PostgreSQL, as an operator
// would during an incident: the overview and its refresh, a filtered
// list, an event's detail, a replay with its dry run and confirmation
// (the rows and the audit entry checked through admin), read-only mode,
// CSRF refusal, and hostile event strings that must stay inert text.
//
// The package has no code of its own; its tests share one browser per
// test binary, each test in a tab of its own browser context (its own
// cookies), so that they run in parallel. They skip, naming the binaries
// looked for, only when no Chromium can be found (PGOUTBOX_CHROMIUM, else
// chromium, chromium-browser or google-chrome in PATH; .ci/run installs
// Debian's chromium). With PGOUTBOX_SCREENSHOTS=1 they save the
// screenshots that docs/console.md shows into docs/console/.
package console
