package sse

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// Seeds: the final responses in OpenAI's shapes (the project's, and the
// recordings' when CODEINTERP_FIXTURES is set), plus hand-made oddities.
func FuzzEventStream(f *testing.F) {
	for _, src := range fixtures.Sources(f, fixtures.CINonStreaming) {
		f.Add([]byte(src.Turns[0].Response))
	}
	for _, fx := range []string{fixtures.CIStreaming, fixtures.FunctionTool} {
		for _, src := range fixtures.Sources(f, fx) {
			for _, tu := range src.Turns {
				evs := strings.Split(tu.SSE, "\n\n")
				last := evs[len(evs)-2]
				f.Add([]byte(gjson.Get(last[strings.Index(last, "data: ")+6:], "response").Raw))
			}
		}
	}
	f.Add([]byte("{\n  \"id\": \"r\",\n  \"status\": \"failed\",\n  \"output\": [\n    {\"type\": \"message\", \"content\": [{\"type\": \"output_text\", \"text\": \"a\\nb\"}, 7]},\n    \"x\", 3, null\n  ]\n}"))
	f.Add([]byte(`{"id":"r","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"\u2028"}],"content":[{"type":"reasoning_text","text":"\ud83d\ude00"}]},{"type":"custom_tool_call","input":"x"}]}`))
	f.Fuzz(func(t *testing.T, final []byte) {
		if !gjson.ValidBytes(final) || !gjson.ParseBytes(final).IsObject() {
			return // the splice only ever hands over a response object
		}
		for _, obfuscate := range []bool{true, false} {
			out := EventStream(final, obfuscate)
			evs := parseSSE(t, string(out))
			if len(evs) < 3 || evs[0].Name != "response.created" || evs[1].Name != "response.in_progress" {
				t.Fatalf("stream opening: %s", out)
			}
			for i, e := range evs {
				if e.Data.Get("sequence_number").Int() != int64(i) {
					t.Fatalf("event %d: %s", i, e.Data.Raw)
				}
			}
			if got, want := evs[len(evs)-1].Data.Get("response").Raw, string(pretty.Ugly(final)); got != want {
				t.Fatalf("terminal response differs:\n got %s\nwant %s", got, want)
			}
		}
	})
}
