package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/internal/idgen"
)

// BenchmarkMessagesBash: one bash command (echo 25) in a warm gVisor
// container through the whole path — /v1/messages with Anthropic's
// code_execution (the command as one step of the container's bash
// session) beside the same command through /v1/responses with OpenAI's
// hosted shell on the same container: client → devproxy → ext_proc →
// the processor → the sandbox, two model rounds each (the scripted
// models answer at once). Each side declares its two tools (bash and the
// editor; code_interpreter and the shell, which the scripted Responses
// model requires). Issue 40: messages ≤ 1.1× responses-shell.
func BenchmarkMessagesBash(b *testing.B) {
	sh := loadShapes(b)
	var s *stack
	// The Responses model (the fixture's shapes): a shell call, then the
	// answer.
	responses := func(w http.ResponseWriter, body []byte) {
		items := ""
		if !strings.Contains(string(body), `"function_call_output"`) {
			args, _ := json.Marshal(map[string]any{"commands": []string{"echo 25"}, "timeout_ms": nil, "max_output_length": nil})
			it := sh.functionCall
			it, _ = sjson.Set(it, "id", idgen.New("fc_"))
			it, _ = sjson.Set(it, "call_id", idgen.New("call_")[:29])
			it, _ = sjson.Set(it, "name", "shell")
			items, _ = sjson.Set(it, "arguments", string(args))
		} else {
			if !strings.Contains(string(body), `stdout:\n25\n`) {
				b.Errorf("the model was told %s", body)
			}
			items, _ = sjson.Set(sh.message, "content.0.text", "25")
		}
		doc, _ := sjson.Set(sh.envelope, "id", idgen.New("resp_"))
		doc, _ = sjson.SetRaw(doc, "output", "["+items+"]")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, doc)
	}
	// The Messages model: a bash call, then the answer.
	upstream := newRawUpstream(b, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/v1/messages" {
			responses(w, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		msgs := gjson.GetBytes(body, "messages").Array()
		content := toolUse("toolu_"+idgen.Random("", 12), "bash_code_execution", `{"command":"echo 25"}`)
		stop := "tool_use"
		if last := msgs[len(msgs)-1]; last.Get("content.0.type").Str == "tool_result" {
			if !strings.Contains(last.Get("content.0.content").Str, "stdout:\n25\n") {
				b.Errorf("the model was told %s", last.Raw)
			}
			content, stop = textBlock("25"), "end_turn"
		}
		_, _ = io.WriteString(w, `{"id":"msg_b","type":"message","role":"assistant","model":"m","content":[`+content+`],"stop_reason":"`+stop+`","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
	})
	s = newStackWithUpstream(b, sh, upstream, stackOptions{provider: "gvisor", containers: true, messages: true, quiet: true})
	c := &http.Client{}
	messages := func(body string) gjson.Result {
		req, _ := http.NewRequest(http.MethodPost, s.proxyURL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", apiKey) // the owner of "Bearer apiKey": the same container
		req.Header.Set("anthropic-version", "2023-06-01")
		res, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if gjson.GetBytes(out, "content.1.content.stdout").Str != "25\n" {
			b.Fatalf("no bash result: %s", out)
		}
		return gjson.ParseBytes(out)
	}
	first := messages(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"echo 25"}],"tools":[` + codeExecTool + `]}`)
	ctr := first.Get("container.id").Str
	mBody := `{"model":"m","max_tokens":9,"container":"` + ctr + `","messages":[{"role":"user","content":"echo 25"}],"tools":[` + codeExecTool + `]}`
	rBody := `{"model":"gpt-5.6","input":"echo 25","store":false,"tools":[{"type":"code_interpreter","container":"` + ctr + `"},{"type":"shell","environment":{"type":"container_reference","container_id":"` + ctr + `"}}]}`
	b.Run("messages", func(b *testing.B) {
		for b.Loop() {
			messages(mBody)
		}
	})
	b.Run("responses-shell", func(b *testing.B) {
		for b.Loop() {
			res, err := post(c, s.proxyURL+"/v1/responses", rBody)
			if err != nil {
				b.Fatal(err)
			}
			out, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(out), `"shell_call_output"`) || !strings.Contains(string(out), `"stdout":"25\n"`) {
				b.Fatalf("no shell output: %s", out)
			}
		}
	})
}
