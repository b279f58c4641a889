package main

import (
	"net/url"
)

// smokeRuns are the tiny runs of every case and mode, used by the unit test
// and by `-case suite -short`.
func smokeRuns() [][]string {
	n := []string{"-n", "200"}
	return [][]string{
		append([]string{"-case", "pgoutbox", "-mode", "emit"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "emit-batch", "-batch", "100"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch", "-delete-sent"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch", "-types", "7"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch-kafka"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch-nats"}, n...),
		append([]string{"-case", "pgoutbox", "-mode", "dispatch-rabbitmq"}, n...),
		append([]string{"-case", "raw-sql", "-mode", "insert"}, n...),
		append([]string{"-case", "raw-sql", "-mode", "copy", "-batch", "100"}, n...),
		append([]string{"-case", "raw-sql", "-mode", "dispatch"}, n...),
		append([]string{"-case", "minimal", "-mode", "insert"}, n...),
		append([]string{"-case", "minimal", "-mode", "copy", "-batch", "100"}, n...),
		append([]string{"-case", "minimal", "-mode", "insert-multi", "-batch", "100"}, n...),
		append([]string{"-case", "minimal", "-mode", "dispatch"}, n...),
		append([]string{"-case", "minimal", "-mode", "dispatch-delete"}, n...),
		append([]string{"-case", "walcost", "-batch", "20"}, n...),
		append([]string{"-case", "river", "-mode", "insert"}, n...),
		append([]string{"-case", "river", "-mode", "insert-many", "-batch", "100"}, n...),
		append([]string{"-case", "river", "-mode", "work", "-tuned"}, n...),
		append([]string{"-case", "watermill", "-batch", "100"}, n...),
		{"-case", "claim", "-backlog", "1000"},
		{"-case", "latency", "-rate", "200", "-duration", "1s"},
		append([]string{"-case", "relay", "-mode", "throughput", "-batch", "50"}, n...),
		append([]string{"-case", "relay", "-mode", "throughput", "-publisher", "kfake"}, n...),
		append([]string{"-case", "relay", "-mode", "throughput", "-publisher", "nats"}, n...),
		{"-case", "relay", "-mode", "latency", "-rate", "200", "-duration", "1s"},
		{"-case", "relay", "-mode", "longtx", "-rate", "200", "-hold", "1s"},
	}
}

// hostOf is the host:port of a URL (127.0.0.1:5432 when unparsable, port
// 5432 when it names none).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "127.0.0.1:5432"
	}
	if u.Port() == "" {
		return u.Host + ":5432"
	}
	return u.Host
}
