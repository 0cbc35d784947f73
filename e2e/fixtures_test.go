package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"
)

// The recorded OpenAI traffic lives outside the repository: ../shared/fixtures
// relative to the repo root, or $CODEINTERP_FIXTURES. It is read, never copied.
const (
	fixtureCINonStreaming = "code-interpreter-openai-reference-gpt-5.6-nonstreaming.yaml"
	fixtureCIStreaming    = "code-interpreter-openai-reference-gpt-5.6-streaming.yaml"
	fixtureFunctionTool   = "codex-openai-https-function-tool-gpt-4o-streaming.yaml"
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

// cassetteTurn is one recorded HTTP exchange.
type cassetteTurn struct {
	RequestBody string            // JSON
	Headers     map[string]string // request headers
	Status      int
	RespHeaders map[string]string
	RespBody    string // JSON, "" for streams
	SSE         string // the raw event stream, "" for JSON answers
	Events      []gjson.Result
}

func loadCassette(t testing.TB, name string) []cassetteTurn {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixturesDir(t), name))
	if err != nil {
		t.Fatalf("reading fixture %s: %v", name, err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("fixture %s is not YAML: %v", name, err)
	}
	var out []cassetteTurn
	gjson.GetBytes(js, "turns").ForEach(func(_, tr gjson.Result) bool {
		ct := cassetteTurn{
			RequestBody: tr.Get("request.body").Raw,
			Status:      int(tr.Get("response.status_code").Int()),
			Headers:     map[string]string{},
			RespHeaders: map[string]string{},
		}
		tr.Get("request.headers").ForEach(func(k, v gjson.Result) bool { ct.Headers[k.Str] = v.Str; return true })
		tr.Get("response.headers").ForEach(func(k, v gjson.Result) bool { ct.RespHeaders[k.Str] = v.Str; return true })
		if b := tr.Get("response.body"); b.Exists() {
			ct.RespBody = b.Raw
		}
		if s := tr.Get("response.sse"); s.Exists() {
			var sb strings.Builder
			s.ForEach(func(_, line gjson.Result) bool {
				sb.WriteString(line.Str)
				if d, ok := strings.CutPrefix(line.Str, "data: "); ok {
					ct.Events = append(ct.Events, gjson.Parse(strings.TrimSpace(d)))
				}
				return true
			})
			ct.SSE = sb.String()
		}
		out = append(out, ct)
		return true
	})
	if len(out) == 0 {
		t.Fatalf("fixture %s has no turns", name)
	}
	return out
}

// shapes are the JSON shapes the scripted model replays, all taken from
// real OpenAI traffic.
type shapes struct {
	// envelope is a complete non-streamed Response object (the
	// response.completed payload of a function-tool turn).
	envelope string
	// functionCall is a real function_call output item.
	functionCall string
	// message is a real assistant message output item.
	message string
	// ciItem is OpenAI's own code_interpreter_call item: the shape our
	// output must match.
	ciItem gjson.Result
	// prompt and code are the reference conversation's prompt and the code
	// OpenAI's model ran for it.
	prompt, code string
	// ciEventTypes is the reference streamed event-type sequence with
	// consecutive repeats merged.
	ciEventTypes []string
	// passThrough is a real function-tool exchange (request body and SSE
	// answer) for the pass-through cases.
	passThrough cassetteTurn
}

func loadShapes(t testing.TB) shapes {
	t.Helper()
	ft := loadCassette(t, fixtureFunctionTool)
	completed := func(ct cassetteTurn) gjson.Result {
		for _, ev := range ct.Events {
			if ev.Get("type").Str == "response.completed" {
				return ev.Get("response")
			}
		}
		t.Fatalf("fixture %s: no response.completed event", fixtureFunctionTool)
		return gjson.Result{}
	}
	t1, t2 := completed(ft[0]), completed(ft[1])
	ci := loadCassette(t, fixtureCINonStreaming)[0]
	cis := loadCassette(t, fixtureCIStreaming)[0]
	var types []string
	for _, ev := range cis.Events {
		ty := ev.Get("type").Str
		if len(types) == 0 || types[len(types)-1] != ty {
			types = append(types, ty)
		}
	}
	s := shapes{
		envelope:     t1.Raw,
		functionCall: t1.Get("output.0").Raw,
		message:      t2.Get("output.0").Raw,
		ciItem:       gjson.Get(ci.RespBody, "output.0"),
		prompt:       gjson.Get(ci.RequestBody, "input").Str,
		code:         gjson.Get(ci.RespBody, "output.0.code").Str,
		ciEventTypes: types,
		passThrough:  ft[0],
	}
	for name, v := range map[string]string{"envelope": s.envelope, "function_call": s.functionCall, "message": s.message, "prompt": s.prompt, "code": s.code} {
		if v == "" {
			t.Fatalf("fixture shape %s is empty: the fixtures changed", name)
		}
	}
	if gjson.Get(s.functionCall, "type").Str != "function_call" || gjson.Get(s.message, "type").Str != "message" || s.ciItem.Get("type").Str != "code_interpreter_call" {
		t.Fatal("fixture items are not the expected types: the fixtures changed")
	}
	return s
}
