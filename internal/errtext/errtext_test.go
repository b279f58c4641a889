package errtext

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrap(t *testing.T) {
	t.Parallel()
	inner := errors.New("pgoutbox: inner")
	kind := errors.New("pgoutbox: kind")
	plain := errors.New("plain")

	require.Nil(t, Wrap(nil, "x"))
	require.EqualError(t, Wrap(inner, "op %d", 1), "pgoutbox: op 1: inner")
	require.EqualError(t, Wrap(plain, "op"), "pgoutbox: op: plain")
	require.EqualError(t, WrapHint(inner, "do this", "op"), "pgoutbox: op: inner (do this)")
	require.EqualError(t, WrapAs(kind, inner, "event %s", "e"), "pgoutbox: kind: event e: inner")
	require.EqualError(t, WrapAs(kind, inner, ""), "pgoutbox: kind: inner")
	require.EqualError(t, Because(kind, plain), "pgoutbox: kind")
	require.EqualError(t, Wrap(Wrap(inner, "a"), "b"), "pgoutbox: b: a: inner")

	require.ErrorIs(t, Wrap(inner, "op"), inner)
	require.ErrorIs(t, WrapAs(kind, inner, "op"), kind)
	require.ErrorIs(t, WrapAs(kind, inner, "op"), inner)
	require.ErrorIs(t, Wrap(Because(kind, plain), "op"), kind)
	require.ErrorIs(t, Wrap(Because(kind, plain), "op"), plain)
	require.Equal(t, "no prefix", Trim("no prefix"))
}
