package testdb

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Querier runs a statement: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Plan is what EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) says of one
// execution of a statement, walked over its whole tree (subplans and init
// plans included).
type Plan struct {
	// SeqScans are the relations read by a Seq Scan (or a parallel one).
	SeqScans []string
	// Indexes are the indexes read by an index, index-only or bitmap
	// index scan.
	Indexes []string
	// Buffers are the shared buffers (hit and read) the top node touched,
	// children included.
	Buffers float64
	// Rows are the rows the top node returned.
	Rows float64
	// Text is the plan as indented JSON, for failure messages.
	Text string
}

// Explain runs stmt with args under EXPLAIN (ANALYZE, BUFFERS, FORMAT
// JSON) on q and walks its plan. A write is executed: run it in a
// transaction that the test rolls back.
func Explain(tb testing.TB, q Querier, stmt string, args ...any) Plan {
	tb.Helper()
	var out []map[string]any
	require.NoError(tb, q.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmt, args...).Scan(&out), stmt)
	top := out[0]["Plan"].(map[string]any)
	var p Plan
	p.walk(top)
	hit, _ := top["Shared Hit Blocks"].(float64)
	read, _ := top["Shared Read Blocks"].(float64)
	p.Buffers = hit + read
	p.Rows, _ = top["Actual Rows"].(float64)
	text, _ := json.MarshalIndent(top, "", " ")
	p.Text = string(text)
	return p
}

func (p *Plan) walk(node map[string]any) {
	switch node["Node Type"] {
	case "Seq Scan":
		p.SeqScans = append(p.SeqScans, node["Relation Name"].(string))
	case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
		p.Indexes = append(p.Indexes, node["Index Name"].(string))
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		p.walk(c.(map[string]any))
	}
}
