package jsonx

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestAppendQuote(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\ nl\n tab\t cr\r", "\x00\x1f", "<html>&", "é日本", "\u2028\u2029", "bad\xffutf8"} {
		enc := AppendQuote(nil, s)
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, enc, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if back != want {
			t.Errorf("%q → %s → %q", s, enc, back)
		}
		if strings.Contains(s, "<") && !strings.Contains(string(enc), "<") {
			t.Errorf("HTML escaped: %s", enc)
		}
	}
}

// FuzzTopFields: the fast top-level walk agrees with gjson on every valid
// JSON object.
func FuzzTopFields(f *testing.F) {
	f.Add(`{"a":"x\\\"y","b":[1,{"c":"]}"}],"d":-1.5e3,"e":true,"f":null,"g":{"h":"\\\\"}}`)
	f.Add(` { "k" : "v" , "k" : [ ] } `)
	f.Add(`{"s":"\u00e9\ud83d\ude00","n":0}`)
	f.Add(requestLike(2 << 10))
	f.Fuzz(func(t *testing.T, raw string) {
		if !gjson.Valid(raw) || !gjson.Parse(raw).IsObject() {
			TopFields(raw) // must not panic on anything
			return
		}
		fast, slow := TopFields(raw), Fields(raw)
		if len(fast) != len(slow) {
			t.Fatalf("%d fields, gjson finds %d", len(fast), len(slow))
		}
		for i := range fast {
			a, b := fast[i], slow[i]
			if a.Key != b.Key || a.Start != b.Start || a.End != b.End || a.Value.Raw != b.Value.Raw ||
				a.Value.Type != b.Value.Type || a.Value.Str != b.Value.Str || a.Value.Index != b.Value.Index {
				t.Fatalf("field %d: fast %+v, gjson %+v", i, a, b)
			}
		}
	})
}

// requestLike is a Responses request of about n bytes: a conversation of
// messages with quotes, escapes and non-ASCII text (the bulk), then tools
// after the input (the worst place for a scanner).
func requestLike(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5.6","instructions":"Be brief.","input":[`)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. \"Quoted\" and \\escaped\\ text, unicode é 日本. ", 10)
	for i := 0; b.Len() < n-300; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b.WriteString(`{"type":"message","role":"` + role + `","content":[{"type":"input_text","text":` + Quote(text) + `}]}`)
	}
	b.WriteString(`],"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}},`)
	b.WriteString(`{"type":"code_interpreter","container":{"type":"auto"}}],"tool_choice":"auto","stream":true,"store":false}`)
	return b.String()
}
