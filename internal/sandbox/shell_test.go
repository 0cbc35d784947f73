package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTextPieces: output read in chunks that cut characters anywhere (the
// kernel reads its pipes 64 KiB at a time) reaches the listener as valid
// UTF-8 pieces whose concatenation is the output, per command and stream;
// a character cut at the end of a command's output is U+FFFD.
func TestTextPieces(t *testing.T) {
	text := "héllo ✓ 日本語 😀 done"
	for size := 1; size <= 5; size++ {
		var got [2][2]strings.Builder
		tp := NewTextPieces(func(cmd int, out, errOut string) {
			if !utf8.ValidString(out) || !utf8.ValidString(errOut) {
				t.Fatalf("size %d: a piece splits a character: %q %q", size, out, errOut)
			}
			got[cmd][0].WriteString(out)
			got[cmd][1].WriteString(errOut)
		})
		for cmd := 0; cmd < 2; cmd++ {
			for i := 0; i < len(text); i += size {
				p := text[i:min(i+size, len(text))]
				tp.Piece(cmd, p, p)
			}
		}
		tp.Flush()
		for cmd := 0; cmd < 2; cmd++ {
			if got[cmd][0].String() != text || got[cmd][1].String() != text {
				t.Fatalf("size %d command %d: %q / %q", size, cmd, got[cmd][0].String(), got[cmd][1].String())
			}
		}
	}
	var last string
	tp := NewTextPieces(func(_ int, out, _ string) { last += out })
	tp.Piece(0, "ab\xe2\x9c", "")
	tp.Piece(1, "x", "")
	if last != "ab\uFFFDx" {
		t.Fatalf("a character cut at the command's end: %q", last)
	}
}
