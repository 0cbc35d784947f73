package interceptor

import (
	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// Golden files pin what the model and the client are shown, so a change to
// the wording or the event layout is a reviewed diff. They hold only data
// this project wrote. Regenerate with CODEINTERP_UPDATE_GOLDEN=1.

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "interceptor", name)
	if os.Getenv("CODEINTERP_UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file %s missing (run with CODEINTERP_UPDATE_GOLDEN=1 to write it): %v", path, err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from the golden file (CODEINTERP_UPDATE_GOLDEN=1 to accept)\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// TestGoldenFunctionTool: the tool definition the upstream model gets.
func TestGoldenFunctionTool(t *testing.T) {
	wasm := sandbox.Environment{Provider: "wasm", PythonVersion: "3.13"}
	golden(t, "function-tool.json", []byte(codeinterpreter.Tool{Fn: "code_interpreter"}.Function(wasm, nil)+"\n"))
	// What the gVisor provider reports: its packages, found by importing
	// them inside a sandbox, and images.
	gv := sandbox.Environment{Provider: "gvisor", PythonVersion: "3.11", Images: true,
		Packages: []string{"matplotlib", "numpy", "pandas", "scipy", "sklearn"}}
	golden(t, "function-tool-gvisor.json", []byte(codeinterpreter.Tool{Fn: "code_interpreter"}.Function(gv, nil)+"\n"))
}

// TestGoldenModelOutputs: what the model is told for every kind of result.
func TestGoldenModelOutputs(t *testing.T) {
	png := testPNG(t, 4, 3)
	pngImg := sandbox.Image{MediaType: "image/png", Data: png}
	// hidden: the request did not include code_interpreter_call.outputs.
	hidden := map[string]bool{"chart, outputs not requested": true}
	cases := []struct {
		name string
		c    call
	}{
		{"completed", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "385\n"}}},
		{"completed, no output", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted}}},
		{"python exception", call{res: sandbox.Result{Outcome: sandbox.OutcomeError, Stdout: "before\n",
			Stderr: "Traceback (most recent call last):\n  File \"<cell 2>\", line 1, in <module>\nZeroDivisionError: division by zero\n"}}},
		{"timeout", call{res: sandbox.Result{Outcome: sandbox.OutcomeTimeout, Stdout: "partial", Detail: "wall time limit of 30s reached"}}},
		{"memory", call{res: sandbox.Result{Outcome: sandbox.OutcomeMemoryLimit, Detail: "guest memory limit of 256 MiB reached"}}},
		{"output truncated", call{res: sandbox.Result{Outcome: sandbox.OutcomeOutputTruncated, Stdout: "xxxx", StdoutTruncated: true}}},
		{"capacity", call{res: sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "no Python interpreter was free in time; try again later"}}},
		{"state lost", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "False\n", StateLost: true}}},
		{"container reset", call{reset: true, res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "False\n"}}},
		{"restored behind the last calls", call{behind: true, res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "1\n"}}},
		{"bad arguments", call{argErr: "the arguments are not a JSON object"}},
		{"not run", call{notRun: "the limit of 3 code_interpreter calls for this response was reached"}},
		{"chart and its path", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "'/mnt/data/plot.png'\n", Images: []sandbox.Image{pngImg}}}},
		{"charts, no text", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Images: []sandbox.Image{pngImg, {MediaType: "IMAGE/JPEG", Data: []byte("\xff\xd8\xff\xe0 jpeg")}, pngImg}}}},
		{"chart, outputs not requested", call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Images: []sandbox.Image{pngImg}}}},
		{"exception after a chart", call{res: sandbox.Result{Outcome: sandbox.OutcomeError, Stderr: "ValueError: bad\n", Images: []sandbox.Image{pngImg}}}},
	}
	var b strings.Builder
	for _, tc := range cases {
		b.WriteString("=== " + tc.name + " (client status: " + ciStatus(&tc.c) + ")\n")
		b.WriteString(modelOutput(&tc.c, !hidden[tc.name]))
	}
	golden(t, "model-outputs.txt", []byte(b.String()))
}

// TestGoldenSSE: the full synthetic stream of a response with every item
// kind (obfuscation off, so the stream is deterministic).
func TestGoldenSSE(t *testing.T) {
	final := `{"id":"resp_golden","object":"response","created_at":1700000000,"status":"completed","completed_at":1700000009,"error":null,"incomplete_details":null,"model":"golden-model","output":[` +
		`{"id":"rs_golden","type":"reasoning","summary":[{"type":"summary_text","text":"Square and add."}]},` +
		`{"id":"ci_golden","type":"code_interpreter_call","status":"completed","code":"print(sum(i*i for i in range(11)))\n","container_id":"cntr_golden","outputs":[{"type":"logs","logs":"385\n"}]},` +
		`{"id":"msg_golden","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"The sum is 385."}],"role":"assistant"}` +
		`],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":15}}`
	golden(t, "stream-every-item.sse", sse.EventStream([]byte(final), false))
}
