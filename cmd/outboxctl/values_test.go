package main

import (
	"bytes"
	"context"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestKnownCodes reads every constant of type Code in the outbox package's
// source and requires knownCodes to list exactly those, in order: a new
// code must be added to the list, or replay -code would reject it.
func TestKnownCodes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../outbox/*.go")
	require.NoError(t, err)
	var declared []outbox.Code
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if typ, ok := spec.Type.(*ast.Ident); !ok || typ.Name != "Code" {
				return true
			}
			for _, v := range spec.Values {
				s, err := strconv.Unquote(v.(*ast.BasicLit).Value)
				require.NoError(t, err)
				declared = append(declared, outbox.Code(s))
			}
			return true
		})
	}
	require.NotEmpty(t, declared)
	require.Equal(t, declared, knownCodes)
}

func TestParse(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args, positional []string
		json             bool
	}{
		"FlagsFirst":       {[]string{"-json", "a"}, []string{"a"}, true},
		"FlagsAfter":       {[]string{"a", "-json"}, []string{"a"}, true},
		"FlagsBetween":     {[]string{"a", "-json", "b"}, []string{"a", "b"}, true},
		"DoubleDash":       {[]string{"a", "--", "-json"}, []string{"a", "-json"}, false},
		"None":             {nil, nil, false},
		"OnlyDoubleDash":   {[]string{"--"}, nil, false},
		"FlagValueNotArgs": {[]string{"-s", "x", "a"}, []string{"a"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			j := fs.Bool("json", false, "")
			fs.String("s", "", "")
			got, err := parse(fs, tc.args)
			require.NoError(t, err)
			require.Equal(t, tc.positional, got)
			require.Equal(t, tc.json, *j)
		})
	}
}

func TestShownPayload(t *testing.T) {
	t.Parallel()
	ascii := bytes.Repeat([]byte("a"), payloadShown+10)
	require.Len(t, shownPayload(ascii, false), payloadShown)
	require.Len(t, shownPayload(ascii, true), len(ascii))
	require.Len(t, shownPayload(ascii[:payloadShown], false), payloadShown)
	// A three-byte character that straddles the cut is left out whole.
	for offset := 1; offset <= 2; offset++ {
		text := append(bytes.Repeat([]byte("a"), payloadShown-offset), []byte("€€")...)
		shown := shownPayload(text, false)
		require.Len(t, shown, payloadShown-offset)
		require.True(t, strings.HasSuffix(string(shown), "a"))
	}
	ends := append(bytes.Repeat([]byte("a"), payloadShown-3), []byte("€€")...)
	require.Equal(t, "€", string(shownPayload(ends, false)[payloadShown-3:]), "a character that fits stays")
	binary := bytes.Repeat([]byte{0xff}, payloadShown+1)
	require.Len(t, shownPayload(binary, false), payloadShown)
}

// TestStatusFrames checks how watch frames are separated: a clear-screen
// on a terminal, a blank line elsewhere.
func TestStatusFrames(t *testing.T) {
	t.Parallel()
	s := admin.Summary{Counts: admin.Counts{At: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)}}
	for _, tty := range []bool{false, true} {
		var b bytes.Buffer
		e := &env{ctx: context.Background(), out: &b, tty: tty}
		require.NoError(t, e.printStatus(s, 0, true, time.Second))
		first := b.Len()
		require.NoError(t, e.printStatus(s, 1, true, time.Second))
		out := b.String()
		require.Contains(t, out, "every 1s; Ctrl-C to stop")
		if tty {
			require.True(t, strings.HasPrefix(out, clearScreen))
			require.True(t, strings.HasPrefix(out[first:], clearScreen))
		} else {
			require.NotContains(t, out, clearScreen)
			require.True(t, strings.HasPrefix(out[first:], "\n"))
		}
	}
}

// A DueBlocked counted up to its limit is a lower bound: status and counts
// show blocked as at least, due now as at most, and say why.
func TestCountRowsShowALimitedBlockedCount(t *testing.T) {
	c := admin.Counts{Pending: 10, Due: 8, DueBlocked: 3, DueBlockedLimited: true}
	require.Equal(t, [][]string{{"PENDING", "10"}, {"  due now", "≤5"}, {"  blocked", "≥3"}}, countRows(c)[:3])
	require.Contains(t, blockedNote(c), "at least")
	c.DueBlockedLimited = false
	require.Equal(t, [][]string{{"PENDING", "10"}, {"  due now", "5"}, {"  blocked", "3"}}, countRows(c)[:3])
	require.NotContains(t, blockedNote(c), "at least")
}
