// Package loglimit bounds the log lines of repeated errors: each distinct
// line (by a key its caller chooses) is let through at most once per
// Interval, the repeats held back are counted, and lines whose repeats were
// held back come out of Due (or Evict, when the Limiter remembers more than
// MaxLines lines) for a one-line summary.
//
// Its one caller is the dispatcher's reporter (dispatcher/report.go), which
// logs what Allow lets through with the count of repeats held back
// (repeats_not_logged) and logs the summaries; the coordinator has it call
// Due every poll, and Run once, forced, when it ends. The Limiter takes the
// time as an argument (the reporter's clock) and logs nothing itself. Its
// lock is a leaf: it calls nothing while holding it.
package loglimit
