package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/modelstream"
)

// scriptedModel stands in for an LLM so the demo runs anywhere: it answers
// the Responses API the way a model given a function tool does. Turn one
// calls the code_interpreter function with demoCode; once it has the
// function's output, it answers with what the code printed.
type scriptedModel struct {
	log io.Writer
}

// demoCode is what the scripted model asks the sandbox to run.
const demoCode = "import statistics\nsquares = [i * i for i in range(1, 11)]\nprint(f\"sum={sum(squares)} mean={statistics.mean(squares)}\")"

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A model asked for a stream streams (the gateway asks when its client
	// does and streams are live); otherwise it answers with JSON.
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") || !gjson.ValidBytes(body) {
		writeJSON(w, http.StatusBadRequest, `{"error":{"message":"the demo model only answers POST /v1/responses with JSON","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	req := gjson.ParseBytes(body)
	fn := req.Get(`tools.#(name=="code_interpreter")`)
	if fn.Get("type").Str != "function" {
		writeJSON(w, http.StatusBadRequest, `{"error":{"message":"no code_interpreter function tool: the request did not go through the gateway","type":"invalid_request_error","param":"tools","code":null}}`)
		return
	}
	var output string
	req.Get("input").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "function_call_output" {
			output = it.Get("output").Str
		}
		return true
	})
	var item string
	if output == "" {
		fmt.Fprintf(m.log, "[model] got the %q function tool (stream=%v); calling it\n", fn.Get("name").Str, req.Get("stream").Bool())
		args, _ := json.Marshal(map[string]string{"code": demoCode})
		item = mustJSON(map[string]any{
			"id": idgen.New("fc_"), "type": "function_call", "status": "completed",
			"arguments": string(args), "call_id": idgen.New("call_")[:29], "name": "code_interpreter",
		})
	} else {
		fmt.Fprintf(m.log, "[model] got the function's output:\n%s", indent(output))
		printed := "(nothing printed)"
		if _, rest, ok := strings.Cut(output, "stdout:\n"); ok {
			printed, _, _ = strings.Cut(rest, "\n")
		}
		item = mustJSON(map[string]any{
			"id": idgen.New("msg_"), "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "annotations": []any{}, "logprobs": []any{},
				"text": "The code printed " + printed + "."}},
		})
	}
	now := time.Now().Unix()
	resp := mustJSON(map[string]any{
		"id": idgen.New("resp_"), "object": "response", "created_at": now, "completed_at": now, "status": "completed",
		"background": false, "error": nil, "incomplete_details": nil, "instructions": nil,
		"max_output_tokens": nil, "max_tool_calls": nil, "model": "demo-scripted-model",
		"output": []json.RawMessage{json.RawMessage(item)}, "parallel_tool_calls": true,
		"previous_response_id": nil, "store": req.Get("store").Type != gjson.False,
		"temperature": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": json.RawMessage(orDefault(req.Get("tool_choice").Raw, `"auto"`)),
		"tools":       json.RawMessage(req.Get("tools").Raw), "top_p": 1.0, "truncation": "disabled",
		"usage": map[string]any{"input_tokens": 120, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 30, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 150},
		"user": nil, "metadata": map[string]any{},
	})
	if req.Get("stream").Bool() {
		modelstream.Write(w, r, []byte(resp), eventGap, nil, nil)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// eventGap is how long the scripted model "thinks" before each event of a
// stream, so the demo shows the gateway passing tokens on as they come.
const eventGap = 40 * time.Millisecond

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only literal maps above: cannot fail
	}
	return string(b)
}

func orDefault(raw, def string) string {
	if raw == "" {
		return def
	}
	return raw
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("        " + l)
	}
	b.WriteString("\n")
	return b.String()
}
