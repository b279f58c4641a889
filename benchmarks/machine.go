package main

import (
	"context"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// machine describes where the suite ran.
type machine struct {
	cpus     int
	cpuModel string
	memory   string
	goVer    string
	pgVer    string
	settings [][2]string // PostgreSQL setting, value
	loadPre  float64
	started  time.Time
	elapsed  time.Duration
}

// pgSettings are the settings the report shows.
var pgSettings = []string{"shared_buffers", "synchronous_commit", "fsync", "wal_level",
	"max_connections", "work_mem", "checkpoint_timeout", "max_wal_size", "autovacuum"}

func describeEnv(ctx context.Context, url string) machine {
	m := machine{cpus: runtime.NumCPU(), goVer: runtime.Version(), loadPre: loadAverage(), started: time.Now()}
	m.cpuModel = procField("/proc/cpuinfo", "model name")
	m.memory = procField("/proc/meminfo", "MemTotal")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		m.pgVer = "unknown: " + err.Error()
		return m
	}
	defer func() { _ = conn.Close(ctx) }()
	_ = conn.QueryRow(ctx, "SELECT version()").Scan(&m.pgVer)
	for _, s := range pgSettings {
		var v string
		if conn.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v) == nil {
			m.settings = append(m.settings, [2]string{s, v})
		}
	}
	return m
}

// procField is the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
