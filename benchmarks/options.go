package main

import (
	"cmp"
	"os"
	"time"
)

// Options are the parameters of one run; the flags fill them.
type Options struct {
	Case, Mode  string
	URL         string
	N           int
	Writers     int
	Batch       int
	Concurrency int
	Payload     int
	Tuned       bool
	Notify      bool
	Rate        int
	Duration    time.Duration
	Wakeup      bool
	Poll        time.Duration
	Backlog     int
	Rounds      int
	Short       bool
	Out         string
	CPUProfile  string
}

// defaultURL is the admin database: DATABASE_URL, else the test database
// `make test` uses, else the local PostgreSQL.
func defaultURL() string {
	return cmp.Or(os.Getenv("DATABASE_URL"), os.Getenv("PGOUTBOX_TEST_DATABASE_URL"),
		"postgres://postgres@127.0.0.1:5432/postgres")
}

func defaultOptions() Options {
	return Options{
		URL: defaultURL(), N: 50_000, Writers: 4, Batch: 100, Concurrency: 100,
		Payload: 100, Notify: true, Rate: 1000, Duration: 10 * time.Second,
		Wakeup: true, Poll: time.Second, Backlog: 10_000, Rounds: 3,
		Out: "docs/benchmarks.md",
	}
}
