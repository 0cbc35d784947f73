package jsonx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// refCode decodes the first top-level "code" member with encoding/json
// (json.Decoder's tokens, so the first of duplicate names wins, as gjson
// and CodeDecoder take it). ok is false when args is not a JSON object or
// has no string "code".
func refCode(args []byte) (string, bool) {
	if !json.Valid(args) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", false
		}
		if tok == "code" {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", false
			}
			return s, true
		}
	}
	return "", false
}

// decodeChunked feeds args to a CodeDecoder cut at the given offsets.
func decodeChunked(args []byte, cuts []int) (string, bool) {
	var d CodeDecoder
	var out strings.Builder
	prev := 0
	for _, c := range cuts {
		if c < prev || c > len(args) {
			continue
		}
		out.WriteString(d.Feed(string(args[prev:c])))
		prev = c
	}
	out.WriteString(d.Feed(string(args[prev:])))
	return out.String(), d.Done()
}

// randomArgs builds arguments JSON whose code uses every way of spelling a
// character: raw, short escapes, \u escapes (surrogate pairs too, in either
// hex case), broken surrogates; other members around it, some nested.
func randomArgs(r *rand.Rand) []byte {
	alphabet := []rune("ab \n\t\"\\/é日😀\u2028\x01\x1f{}[]:,")
	var code strings.Builder
	for n := r.IntN(40); n > 0; n-- {
		ch := alphabet[r.IntN(len(alphabet))]
		switch k := r.IntN(6); {
		case k == 0 && ch > 0xFFFF:
			hi, lo := 0xD800+((ch-0x10000)>>10), 0xDC00+((ch-0x10000)&0x3FF)
			f := "\\u%04x\\u%04x"
			if r.IntN(2) == 0 {
				f = "\\u%04X\\u%04X"
			}
			fmt.Fprintf(&code, f, hi, lo)
		case k == 1:
			fmt.Fprintf(&code, "\\u%04x", ch&0xFFFF)
		case k == 2 && r.IntN(4) == 0:
			code.WriteString([]string{`\ud83d`, `\ude00`, `\ud83d\u0041`, `\ud83d\n`, `\ud83d\ud83d\ude00`}[r.IntN(5)])
		default:
			b, _ := json.Marshal(string(ch))
			code.Write(b[1 : len(b)-1])
		}
	}
	others := []string{`"x":1`, `"y":"a\"}b"`, `"z":{"code":"nested","k":[1,{"a":"]"}]}`, `"w":[true,null,-1.5e3]`, `"\u0063odex":"no"`, `"v":false`}
	var members []string
	for n := r.IntN(3); n > 0; n-- {
		members = append(members, others[r.IntN(len(others))])
	}
	key := `"code"`
	if r.IntN(5) == 0 {
		key = `"\u0063ode"`
	}
	at := r.IntN(len(members) + 1)
	members = append(members[:at], append([]string{key + `:"` + code.String() + `"`}, members[at:]...)...)
	sep := ","
	if r.IntN(3) == 0 {
		sep = " ,\n "
	}
	return []byte("{" + strings.Join(members, sep) + "}")
}

// TestCodeDecoderRandomChunkings checks the decoder against encoding/json
// on random arguments cut at random places (inside escapes, surrogate
// pairs and UTF-8 sequences included).
func TestCodeDecoderRandomChunkings(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		args := randomArgs(r)
		want, ok := refCode(args)
		if !ok {
			t.Fatalf("generator made arguments encoding/json rejects: %s", args)
		}
		var cuts []int
		for n := r.IntN(8); n > 0; n-- {
			cuts = append(cuts, r.IntN(len(args)+1))
		}
		if r.IntN(10) == 0 { // one byte at a time
			cuts = cuts[:0]
			for k := 1; k < len(args); k++ {
				cuts = append(cuts, k)
			}
		}
		sortInts(cuts)
		got, done := decodeChunked(args, cuts)
		if got != want || !done {
			t.Fatalf("args %s cut at %v:\n got %q (done %v)\nwant %q", args, cuts, got, done, want)
		}
	}
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func TestCodeDecoderCases(t *testing.T) {
	cases := []struct {
		args string
		want string
	}{
		{`{"code":"print(1)\n"}`, "print(1)\n"},
		{`{"a":{"code":"no"},"code":"yes"}`, "yes"},
		{`{"code":"first","code":"second"}`, "first"},
		{`{"code":"\ud83d\ude00 \u00e9"}`, "😀 é"},
		{`{"code":"\ud83d"}`, "\ufffd"},
		{`{"code":"\ude00x"}`, "\ufffdx"},
		{`{"code":"\ud83d\ud83d\ude00"}`, "\ufffd😀"},
		{` { "code" : "a\"b\\c\/" } `, `a"b\c/`},
	}
	for _, c := range cases {
		if want, ok := refCode([]byte(c.args)); !ok || want != c.want {
			t.Fatalf("case %s: encoding/json says %q %v", c.args, want, ok)
		}
		for k := 0; k <= len(c.args); k++ {
			got, done := decodeChunked([]byte(c.args), []int{k})
			if got != c.want || !done {
				t.Errorf("%s cut at %d: %q (done %v), want %q", c.args, k, got, done, c.want)
			}
		}
	}
	// Not an object, or no code: nothing comes out, nothing breaks.
	for _, bad := range []string{`print('x')`, `{"source":"x"}`, `{"code":1}`, `[{"code":"x"}]`, `{"code":"\x"}`} {
		if got, done := decodeChunked([]byte(bad), nil); done || (got != "" && bad != `{"code":"\x"}`) {
			t.Errorf("%s: %q done %v", bad, got, done)
		}
	}
}

// FuzzCodeDecoder: whatever the input and however it is cut, the decoder
// never panics, always returns valid UTF-8, and agrees with encoding/json
// on every valid object with a string "code".
func FuzzCodeDecoder(f *testing.F) {
	f.Add([]byte(`{"code":"print(\"hi\")\n\ud83d\ude00"}`), uint64(7))
	f.Add([]byte(`{"x":[1,{"y":"}"}],"code":"a\\b"}`), uint64(3))
	f.Fuzz(func(t *testing.T, args []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed>>7))
		var cuts []int
		for n := r.IntN(6); n > 0; n-- {
			cuts = append(cuts, r.IntN(len(args)+1))
		}
		sortInts(cuts)
		got, done := decodeChunked(args, cuts)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out of %q: %q", args, got)
		}
		if want, ok := refCode(args); ok && (got != want || !done) {
			t.Fatalf("args %q cuts %v: got %q (done %v), want %q", args, cuts, got, done, want)
		}
	})
}
