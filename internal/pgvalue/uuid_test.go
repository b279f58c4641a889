package pgvalue_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
)

// TestEncodes checks both encodings the exec modes need: binary for a
// known parameter type, text for one pgx must pick from the value (OID 0,
// as in the exec and simple_protocol modes). Not parallel: it counts
// allocations.
func TestEncodes(t *testing.T) {
	m := pgtype.NewMap()
	id := uuid.MustParse("0198c3a4-5b6c-7d8e-9fa0-b1c2d3e4f506")

	buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, pgvalue.UUID(id), nil)
	require.NoError(t, err)
	require.Equal(t, id[:], buf)
	buf, err = m.Encode(0, pgtype.TextFormatCode, pgvalue.UUID(id), nil)
	require.NoError(t, err)
	require.Equal(t, id.String(), string(buf))

	ids := pgvalue.UUIDs([]uuid.UUID{id, uuid.Nil})
	_, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	require.NoError(t, err)
	buf, err = m.Encode(0, pgtype.TextFormatCode, ids, nil)
	require.NoError(t, err)
	require.Equal(t, "{"+id.String()+","+uuid.Nil.String()+"}", string(buf))

	arg := any(pgvalue.UUID(id)) // as a query's []any holds it
	require.Zero(t, testing.AllocsPerRun(10, func() {
		_, _ = m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, arg, buf[:0])
	}), "one uuid encodes in binary without an allocation")
}

// BenchmarkEncodeArray compares what a uuid[] parameter of 1,000 ids
// costs pgx to encode in binary, as pgvalue.UUIDArray and as the forms it
// replaced.
//
//	go test -run '^$' -bench EncodeArray ./internal/pgvalue/
func BenchmarkEncodeArray(b *testing.B) {
	ids := make([]uuid.UUID, 1000)
	raw := make([][16]byte, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		raw[i] = ids[i]
	}
	for _, c := range []struct {
		name  string
		value any
	}{
		{"pgvalue.UUIDArray", pgvalue.UUIDs(ids)},
		{"[][16]byte", raw},
		{"[]uuid.UUID", ids},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := pgtype.NewMap()
			buf := make([]byte, 0, 32<<10)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, c.value, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
