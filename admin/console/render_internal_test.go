package console

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestClip(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", clip("short", 10))
	require.Equal(t, "a\uFFFDb", clip("a\xffb", 10))
	long := strings.Repeat("é", 100) // 200 bytes
	got := clip(long, 11)
	require.True(t, utf8.ValidString(got))
	require.Equal(t, strings.Repeat("é", 5)+" …[truncated: 190 more bytes]", got)
}

func TestViewPayload(t *testing.T) {
	t.Parallel()
	v := viewPayload([]byte("héllo"))
	require.Equal(t, payloadView{Text: "héllo", Size: 6}, v)

	text := []byte(strings.Repeat("a", payloadShown-1) + "é" + "tail")
	v = viewPayload(text)
	require.False(t, v.Hex)
	require.Equal(t, strings.Repeat("a", payloadShown-1), v.Text, "a rune cut in two is left out")
	require.Equal(t, len(text)-(payloadShown-1), v.Omitted)

	v = viewPayload([]byte{0xff, 'A'})
	require.True(t, v.Hex)
	require.Contains(t, v.Text, "ff 41")
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "0s": 0, " 90m ": 90 * time.Minute, "0d": 0} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1h", "soon", "-3d", "1.5d"} {
		_, err := parseAge(in)
		require.Error(t, err, in)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	for _, in := range []string{"2026-05-01T10:30:00Z", "2026-05-01T12:30:00+02:00", "2026-05-01T10:30", "2026-05-01 10:30"} {
		got, err := parseTime("from", in)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), in)
	}
	_, err := parseTime("from", "yesterday")
	require.ErrorContains(t, err, "from is not a time")
}
