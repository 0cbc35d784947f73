package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// The official JS clients over whole conversations (issue 17): each script
// in e2e/node runs a three-turn conversation — a computation, a Python
// exception, a question about the first result — against the whole stack,
// and prints what the client decoded. The test checks what the client saw
// and, above all, that in every turn the scripted model was shown the real
// earlier code and its outputs.

// nodeDir holds the scripts and their package.json (go test runs in e2e/).
const nodeDir = "node"

// The conversation: the scripted model decides a turn by its user message.
var nodePrompts = [3]string{
	"Use Python to compute 6*7 and keep it in x.",
	"Now use Python to divide 1 by 0.",
	"What was the result of the first computation?",
}

const (
	nodeCode1 = "x = 6*7\nprint(x)" // turn 1: prints 42
	nodeCode2 = "1/0"               // turn 2: raises ZeroDivisionError
)

// nodeVariant is one way a client carries the conversation on; the
// script reads it from $VARIANT.
type nodeVariant struct {
	Mode    string `json:"mode"` // "previous_response_id" or "history" (the SDK's own replay)
	Stream  bool   `json:"stream"`
	Include bool   `json:"include"`         // the client asks for the calls' outputs
	Store   *bool  `json:"store,omitempty"` // unset: the SDK's default
}

type nodeCase struct {
	script string // e2e/node/<script>.mjs
	name   string
	v      nodeVariant
	// noStatus: the SDK does not expose a call's status (the AI SDK).
	noStatus bool
}

func (c nodeCase) label() string { return c.script + "/" + c.name }

var nodeCases = []nodeCase{
	{script: "openai", name: "previous_response_id", v: nodeVariant{Mode: "previous_response_id", Include: true}},
	{script: "openai", name: "previous_response_id+stream", v: nodeVariant{Mode: "previous_response_id", Stream: true, Include: true}},
	{script: "openai", name: "history", v: nodeVariant{Mode: "history", Include: true}},
	// Without include the replayed calls carry outputs: null.
	{script: "openai", name: "history+stream+no_include", v: nodeVariant{Mode: "history", Stream: true}},

	// codeInterpreterTool() as the docs show it (no includeOutputs): the
	// SDK replays result.history with outputs: [].
	{script: "agents", name: "history", v: nodeVariant{Mode: "history"}},
	{script: "agents", name: "history+stream", v: nodeVariant{Mode: "history", Stream: true}},
	{script: "agents", name: "history+include", v: nodeVariant{Mode: "history", Include: true}},
	{script: "agents", name: "previous_response_id", v: nodeVariant{Mode: "previous_response_id", Include: true}},
	{script: "agents", name: "previous_response_id+stream", v: nodeVariant{Mode: "previous_response_id", Stream: true, Include: true}},

	// The AI SDK's default store: true replays its response messages as
	// item_reference items; it always asks for the outputs.
	{script: "ai-sdk", name: "item_reference", v: nodeVariant{Mode: "history", Include: true}, noStatus: true},
	{script: "ai-sdk", name: "item_reference+stream", v: nodeVariant{Mode: "history", Stream: true, Include: true}, noStatus: true},
	{script: "ai-sdk", name: "previous_response_id", v: nodeVariant{Mode: "previous_response_id", Include: true}, noStatus: true},
	{script: "ai-sdk", name: "previous_response_id+stream", v: nodeVariant{Mode: "previous_response_id", Stream: true, Include: true}, noStatus: true},

	// LangChain replays its AIMessages' response_metadata.output: outputs
	// null unless include was asked.
	{script: "langchain", name: "history", v: nodeVariant{Mode: "history"}},
	{script: "langchain", name: "history+stream", v: nodeVariant{Mode: "history", Stream: true}},
	{script: "langchain", name: "history+include", v: nodeVariant{Mode: "history", Include: true}},
	{script: "langchain", name: "previous_response_id", v: nodeVariant{Mode: "previous_response_id", Include: true}},
	{script: "langchain", name: "previous_response_id+stream", v: nodeVariant{Mode: "previous_response_id", Stream: true, Include: true}},
}

// nodeStatelessCases run against a model server that keeps nothing.
var nodeStatelessCases = []string{
	"openai/previous_response_id+stream", "openai/history",
	"agents/history", "agents/previous_response_id",
	"ai-sdk/item_reference", "ai-sdk/previous_response_id+stream",
	"langchain/history", "langchain/previous_response_id",
}

func TestNodeClients(t *testing.T) {
	node := nodeReady(t)
	sh := loadShapes(t)
	for _, c := range nodeCases {
		t.Run(c.label(), func(t *testing.T) { runNodeCase(t, sh, node, c, false) })
	}
	for _, label := range nodeStatelessCases {
		i := slices.IndexFunc(nodeCases, func(c nodeCase) bool { return c.label() == label })
		if i < 0 {
			t.Fatalf("stateless case %s is not a case", label)
		}
		t.Run("stateless/"+label, func(t *testing.T) { runNodeCase(t, sh, node, nodeCases[i], true) })
	}
}

// nodeReady returns node's path, failing the test (never skipping) when
// node or the pinned packages are missing.
func nodeReady(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the JS client tests need node and npm (make setup installs Debian's nodejs and npm), then make node-deps")
	}
	out, err := exec.Command(node, "--version").Output()
	var major int
	if _, serr := fmt.Sscanf(string(out), "v%d.", &major); err != nil || serr != nil || major < 20 {
		t.Fatalf("node --version: %q (%v): the pinned JS clients need node 20 or newer", out, err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(nodeDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("e2e/node/package.json: %v", err)
	}
	for name, want := range pkg.Dependencies {
		b, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", name, "package.json"))
		if err != nil {
			t.Fatalf("node_modules missing (%s is not installed): run make node-deps", name)
		}
		if got := gjson.GetBytes(b, "version").Str; got != want {
			t.Fatalf("node_modules stale: %s is %s, package.json pins %s: run make node-deps", name, got, want)
		}
	}
	return node
}

// nodeReport is what a script prints.
type nodeReport struct {
	Turns []struct {
		ResponseID string `json:"response_id"`
		Calls      []struct {
			ID      string          `json:"id"`
			Code    string          `json:"code"`
			Status  *string         `json:"status"`
			Outputs json.RawMessage `json:"outputs"`
		} `json:"calls"`
		Text string `json:"text"`
	} `json:"turns"`
}

func runNodeCase(t *testing.T, sh shapes, node string, c nodeCase, stateless bool) {
	var m *model
	s := newStack(t, sh, nodeScript(&m), stackOptions{stateless: stateless})
	m = s.model
	prompts, _ := json.Marshal(nodePrompts)
	variant, _ := json.Marshal(c.v)
	clientLog := filepath.Join(t.TempDir(), "requests.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, c.script+".mjs"))
	cmd.Env = append(os.Environ(),
		"OPENAI_BASE_URL="+s.proxyURL+"/v1",
		"OPENAI_API_KEY="+apiKey,
		"PROMPTS="+string(prompts),
		"VARIANT="+string(variant),
		"CLIENT_LOG="+clientLog,
		// Nothing may leave the machine: no tracing exports.
		"OPENAI_AGENTS_DISABLE_TRACING=1", "LANGSMITH_TRACING=false", "LANGCHAIN_TRACING_V2=false",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	sent, _ := os.ReadFile(clientLog)
	t.Logf("what the client sent (one line per request):\n%s", sent)
	if err != nil {
		// Say what the model saw too: the usual reason is the stack's.
		checkModelViews(t, m, stateless)
		t.Fatalf("%s.mjs %s: %v (a client error; its stderr:)\n%s\nstdout:\n%s", c.script, c.name, err, stderr.String(), stdout.String())
	}
	var rep nodeReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%s.mjs printed no JSON report (%v):\n%s\nstderr:\n%s", c.script, err, stdout.String(), stderr.String())
	}
	t.Logf("what the client decoded:\n%s", stdout.String())
	checkModelViews(t, m, stateless) // the cause first
	checkClientTurns(t, c, &rep)
}

// checkClientTurns: the client decoded each turn's calls, their code,
// status and outputs, and the answers.
func checkClientTurns(t *testing.T, c nodeCase, rep *nodeReport) {
	t.Helper()
	if len(rep.Turns) != 3 {
		t.Fatalf("the client reported %d turns, want 3", len(rep.Turns))
	}
	logs := func(raw json.RawMessage) string {
		var b strings.Builder
		for _, o := range gjson.ParseBytes(raw).Array() {
			b.WriteString(o.Get("logs").Str)
		}
		return b.String()
	}
	for k, want := range []struct {
		code, logs string
	}{{nodeCode1, "42"}, {nodeCode2, "ZeroDivisionError"}} {
		calls := rep.Turns[k].Calls
		if len(calls) != 1 {
			t.Errorf("turn %d: the client decoded %d code_interpreter_call items, want 1", k+1, len(calls))
			continue
		}
		ci := calls[0]
		if ci.Code != want.code {
			t.Errorf("turn %d: the client decoded code %q, want %q", k+1, ci.Code, want.code)
		}
		if !c.noStatus {
			ok := []string{"in_progress", "completed", "interpreting"} // what the Agents SDK's schema admits
			if ci.Status == nil || !slices.Contains(ok, *ci.Status) {
				t.Errorf("turn %d: call status %v, want one of %v (OpenAI's clients reject others)", k+1, deref(ci.Status), ok)
			}
		}
		if c.v.Include && !strings.Contains(logs(ci.Outputs), want.logs) {
			t.Errorf("turn %d: the client asked for the outputs and got %s, want logs with %q", k+1, ci.Outputs, want.logs)
		}
	}
	if n := len(rep.Turns[2].Calls); n != 0 {
		t.Errorf("turn 3: %d code_interpreter_call items, want none (a question answered without code)", n)
	}
	if !strings.Contains(rep.Turns[2].Text, "42") {
		t.Errorf("turn 3: the answer is %q, want the first result, 42 (the model answers from what it was shown)", rep.Turns[2].Text)
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// nodeScript is the scripted model's side of the conversation.
func nodeScript(m **model) script {
	return func(t testing.TB, c *convo) reply {
		turn, since := nodeTurn(c)
		answered := slices.ContainsFunc(since, func(it gjson.Result) bool { return it.Get("type").Str == "function_call_output" })
		switch turn {
		case 0:
			if !answered {
				return reply{items: []string{(*m).call(nodeCode1)}}
			}
			return reply{items: []string{(*m).message("6*7 is 42; x holds it.")}}
		case 1:
			if !answered {
				return reply{items: []string{(*m).call(nodeCode2)}}
			}
			return reply{items: []string{(*m).message("Dividing by zero raised ZeroDivisionError.")}}
		case 2:
			view, _ := (*m).view(c)
			if out, _, ok := shownOutput(view, nodeCode1); ok && strings.Contains(out, "42") {
				return reply{items: []string{(*m).message("The first result was 42.")}}
			}
			return reply{items: []string{(*m).message("I was not shown the first computation's result.")}}
		}
		t.Errorf("model: a request whose last user message is none of the conversation's: %q", c.userText())
		return reply{items: []string{(*m).message("?")}}
	}
}

// nodeTurn finds the turn of a request by its last user message, and the
// items after that message (this turn's calls and outputs so far).
func nodeTurn(c *convo) (int, []gjson.Result) {
	for i := len(c.items) - 1; i >= 0; i-- {
		it := c.items[i]
		if it.Get("role").Str != "user" {
			continue
		}
		if k := slices.Index(nodePrompts[:], strings.TrimSpace(messageText(it))); k >= 0 {
			return k, c.items[i+1:]
		}
		return -1, nil
	}
	return -1, nil
}

// messageText is a message item's text, whether its content is a string
// or a list of parts.
func messageText(it gjson.Result) string {
	ct := it.Get("content")
	if !ct.IsArray() {
		return ct.Str
	}
	var b strings.Builder
	for _, p := range ct.Array() {
		b.WriteString(p.Get("text").Str)
	}
	return b.String()
}

// view is the conversation as the model understands it: item_reference
// items to items this model produced are resolved (as OpenAI resolves
// them); the problems name every reference it cannot resolve.
func (m *model) view(c *convo) ([]gjson.Result, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []gjson.Result
	var problems []string
	for _, it := range c.items {
		if it.Get("type").Str != "item_reference" {
			out = append(out, it)
			continue
		}
		id := it.Get("id").Str
		if issued, ok := m.issued[id]; ok && !m.stateless {
			out = append(out, issued)
			continue
		}
		if _, ok := m.issued[id]; ok {
			problems = append(problems, fmt.Sprintf("an item_reference to %s reached a model server that keeps no state (the gateway must send the item itself)", id))
		} else {
			problems = append(problems, fmt.Sprintf("an item_reference to %s, an id the model never issued, reached the model (the gateway must resolve its own ids from its store)", id))
		}
		out = append(out, it)
	}
	return out, problems
}

// shownOutput finds the code_interpreter function call with code in the
// view and returns the output the model was given for it: shown is false
// without such a call, answered false without an output for it.
func shownOutput(view []gjson.Result, code string) (out string, shown, answered bool) {
	var ids []string
	for _, it := range view {
		if it.Get("type").Str == "function_call" && it.Get("name").Str == "code_interpreter" &&
			gjson.Get(it.Get("arguments").Str, "code").Str == code {
			ids = append(ids, it.Get("call_id").Str)
		}
	}
	if len(ids) == 0 {
		return "", false, false
	}
	for _, it := range view {
		if it.Get("type").Str == "function_call_output" && slices.Contains(ids, it.Get("call_id").Str) {
			return it.Get("output").Str, true, true
		}
	}
	return "", true, false
}

// checkModelViews: in every turn the model was shown the real earlier code
// and its outputs, with previous_response_id chains expanded through the
// model's own store (convo) and item references resolved (view). A
// problem is reported once per turn, at the first request that shows it.
func checkModelViews(t *testing.T, m *model, stateless bool) {
	t.Helper()
	reqs := m.all()
	seen := map[int]bool{}
	reported := map[string]bool{}
	problem := func(turn int, where, key, msg string) {
		if k := fmt.Sprint(turn, key); !reported[k] {
			reported[k] = true
			t.Errorf("%s: %s", where, msg)
		}
	}
	for i, r := range reqs {
		where := fmt.Sprintf("model request %d", i+1)
		if r.convo == nil {
			t.Errorf("%s: not a Responses request the model understood: %s", where, r.body)
			continue
		}
		if prev := gjson.GetBytes(r.body, "previous_response_id").Str; stateless && prev != "" {
			t.Errorf("%s: previous_response_id %s was sent to a model server that keeps no state, which answers 400 previous_response_not_found: the gateway must send the conversation itself (interceptor.history: expand/auto)", where, prev)
			continue
		}
		turn, since := nodeTurn(r.convo)
		if turn < 0 {
			t.Errorf("%s: no user message of the conversation: %s", where, summarize(r.convo.items))
			continue
		}
		seen[turn] = true
		where += fmt.Sprintf(" (turn %d)", turn+1)
		view, problems := m.view(r.convo)
		for _, p := range problems {
			problem(turn, where, p, p)
		}
		answered := slices.ContainsFunc(since, func(it gjson.Result) bool { return it.Get("type").Str == "function_call_output" })
		must := func(code, want, what string) {
			out, shown, answered := shownOutput(view, code)
			switch {
			case !shown:
				problem(turn, where, "unshown "+code, fmt.Sprintf("the model was not shown %s's code %q; its conversation: %s", what, code, summarize(view)))
			case !answered:
				problem(turn, where, "unanswered "+code, fmt.Sprintf("the model was shown %s's code %q but no output for it (with previous_response_id, the model's stored chain ends at the unanswered function_call: the id the client was given is not the response's last round); its conversation: %s", what, code, summarize(view)))
			case strings.Contains(out, "not recorded"):
				problem(turn, where, "unrecorded "+code, fmt.Sprintf("the model was told the output of %s (%q) is not recorded: %q — the client replayed the call with outputs null/[]/missing and the gateway must give the model the stored outputs", what, code, out))
			case !strings.Contains(out, want):
				problem(turn, where, "wrong "+code, fmt.Sprintf("the model was told %s (%q) output %q, without %q — an empty or wrong output (the client replayed outputs [] or null; the gateway must give the model the stored outputs)", what, code, out, want))
			}
		}
		if turn > 0 || answered {
			must(nodeCode1, "42", "turn 1's computation")
		}
		if turn > 1 || turn == 1 && answered {
			must(nodeCode2, "ZeroDivisionError", "turn 2's exception")
		}
	}
	for k := range nodePrompts {
		if !seen[k] {
			t.Errorf("turn %d never reached the model (%d model requests)", k+1, len(reqs))
		}
	}
}

// summarize is a conversation in one line per item, for messages.
func summarize(items []gjson.Result) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString("\n  ")
		typ := it.Get("type").Str
		switch {
		case it.Get("role").Exists() && (typ == "" || typ == "message"):
			fmt.Fprintf(&b, "%s: %q", it.Get("role").Str, messageText(it))
		case typ == "function_call":
			fmt.Fprintf(&b, "function_call %s %s", it.Get("call_id").Str, it.Get("arguments").Str)
		case typ == "function_call_output":
			fmt.Fprintf(&b, "function_call_output %s %q", it.Get("call_id").Str, it.Get("output").Str)
		default:
			raw := it.Raw
			if len(raw) > 200 {
				raw = raw[:200] + "…"
			}
			b.WriteString(raw)
		}
	}
	return b.String()
}
