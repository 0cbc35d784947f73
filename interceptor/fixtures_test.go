package interceptor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"
)

// The recorded OpenAI traffic lives outside the repository
// (../shared/fixtures relative to the repo root, or $CODEINTERP_FIXTURES).

const (
	fixtureNonStreaming = "code-interpreter-openai-reference-gpt-5.6-nonstreaming.yaml"
	fixtureStreaming    = "code-interpreter-openai-reference-gpt-5.6-streaming.yaml"
	fixtureFunctionTool = "codex-openai-https-function-tool-gpt-4o-streaming.yaml"
)

func fixturesDir(t testing.TB) string {
	t.Helper()
	base := os.Getenv("CODEINTERP_FIXTURES")
	if base == "" {
		base = filepath.Join("..", "..", "shared", "fixtures")
	}
	dir := filepath.Join(base, "openai-reference")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("OpenAI reference fixtures not found at %s (set CODEINTERP_FIXTURES to the directory holding openai-reference/): %v", dir, err)
	}
	return dir
}

// turn is one recorded HTTP exchange.
type turn struct {
	Request  string // request body JSON
	Response string // response body JSON ("" for streams)
	SSE      string // raw event stream ("" for JSON answers)
}

func loadCassette(t testing.TB, name string) []turn {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixturesDir(t), name))
	if err != nil {
		t.Fatalf("reading fixture %s: %v", name, err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("fixture %s is not YAML: %v", name, err)
	}
	var out []turn
	gjson.GetBytes(js, "turns").ForEach(func(_, tr gjson.Result) bool {
		tu := turn{Request: tr.Get("request.body").Raw}
		if b := tr.Get("response.body"); b.Exists() {
			tu.Response = b.Raw
		}
		if s := tr.Get("response.sse"); s.Exists() {
			var sb strings.Builder
			s.ForEach(func(_, line gjson.Result) bool {
				sb.WriteString(line.Str)
				return true
			})
			tu.SSE = sb.String()
		}
		out = append(out, tu)
		return true
	})
	if len(out) == 0 {
		t.Fatalf("fixture %s has no turns", name)
	}
	return out
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Name string
	Data gjson.Result
}

// parseSSE splits an event stream into events and checks the framing OpenAI
// uses: "event:" and "data:" lines, a blank line after each event, data JSON
// whose type equals the event name.
func parseSSE(t testing.TB, stream string) []sseEvent {
	t.Helper()
	var out []sseEvent
	blocks := strings.Split(stream, "\n\n")
	if blocks[len(blocks)-1] != "" {
		t.Fatalf("stream does not end with a blank line: %q", tail(stream))
	}
	for _, b := range blocks[:len(blocks)-1] {
		lines := strings.Split(b, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("malformed event block %q", b)
		}
		name := strings.TrimPrefix(lines[0], "event: ")
		data := strings.TrimPrefix(lines[1], "data: ")
		if !gjson.Valid(data) {
			t.Fatalf("event %s: data is not JSON: %s", name, data)
		}
		d := gjson.Parse(data)
		if d.Get("type").Str != name {
			t.Fatalf("event %s: data type is %q", name, d.Get("type").Str)
		}
		out = append(out, sseEvent{Name: name, Data: d})
	}
	return out
}

func tail(s string) string {
	if len(s) > 80 {
		return s[len(s)-80:]
	}
	return s
}
