package lease

import (
	"testing"

	"github.com/google/uuid"
)

// BenchmarkGroupByToken measures laying out the refs of a completion of
// 1,000 events from 10 claims (no database).
func BenchmarkGroupByToken(b *testing.B) {
	refs := make([]Ref, 1000)
	tokens := make([]uuid.UUID, 10)
	for i := range tokens {
		tokens[i] = uuid.New()
	}
	for i := range refs {
		refs[i] = Ref{ID: uuid.Must(uuid.NewV7()), Token: tokens[i%len(tokens)]}
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(groupByToken(refs)) != len(tokens) {
			b.Fatal("wrong grouping")
		}
	}
}

// BenchmarkDecodeHeaders measures reading one claimed row's headers.
func BenchmarkDecodeHeaders(b *testing.B) {
	raw := []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","x-tenant":"acme","x-source":"checkout"}`)
	b.ReportAllocs()
	for b.Loop() {
		if len(decodeHeaders(raw)) != 3 {
			b.Fatal("wrong headers")
		}
	}
}

// TestGroupByTokenSplitsLargeGroups checks the grouping the statements rely
// on: first-seen token order, positions kept, at most MaxRefsPerStatement
// ids per group.
func TestGroupByTokenSplitsLargeGroups(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	refs := make([]Ref, 0, MaxRefsPerStatement+3)
	for range MaxRefsPerStatement + 1 {
		refs = append(refs, Ref{ID: uuid.New(), Token: a})
	}
	refs = append(refs, Ref{ID: uuid.New(), Token: b}, Ref{ID: uuid.New(), Token: a})
	groups := groupByToken(refs)
	if len(groups) != 3 {
		t.Fatalf("got %d groups, want 3", len(groups))
	}
	if groups[0].token.Bytes != a || len(groups[0].ids) != MaxRefsPerStatement {
		t.Fatalf("first group: token %x, %d ids", groups[0].token.Bytes, len(groups[0].ids))
	}
	if groups[1].token.Bytes != a || len(groups[1].ids) != 2 || groups[1].index[1] != len(refs)-1 {
		t.Fatalf("second group: %+v", groups[1].index)
	}
	if groups[2].token.Bytes != b || groups[2].index[0] != MaxRefsPerStatement+1 {
		t.Fatalf("third group: %+v", groups[2].index)
	}
}
