package interceptor

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// These tests hold conversations with the interceptor and a response
// store: the first turn runs code in the real sandbox, later turns continue
// it the ways the official clients do, and the scripted model must be shown
// the real earlier code and output every time.

const (
	turn1Code = "x = 6*7\nprint(x)"
	turn1Text = "The answer is 42."
	turn2Ask  = "And what was x again?"
)

var ourRespID = regexp.MustCompile(`^resp_c0de[0-9a-f]{46}$`)

func newConvInterceptor(t *testing.T, mod func(*Config)) (*Interceptor, *memory.Responses) {
	t.Helper()
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	ic, err := New(cfg, sandboxtest.New(t), nil, WithResponses(rs))
	if err != nil {
		t.Fatal(err)
	}
	return ic, rs
}

// convPost sends one request through the interceptor as the filter does,
// for the caller owner; it returns the status and the body.
func convPost(t *testing.T, ic *Interceptor, up Upstream, owner, body string) (int, gjson.Result) {
	t.Helper()
	ctx := context.Background()
	x, err := ic.NewExchange(ctx, Caller{Owner: owner}, []byte(body))
	if err != nil {
		var ae *apierror.Error
		if !errors.As(err, &ae) {
			t.Fatalf("NewExchange: %T %v", err, err)
		}
		return ae.Status, gjson.ParseBytes(ae.Body())
	}
	st, hdr, b, err := up.CreateResponse(ctx, x.UpstreamBody())
	if err != nil {
		t.Fatal(err)
	}
	if !x.Intercepted() {
		return st, gjson.ParseBytes(b)
	}
	res, err := x.CompleteResponse(ctx, up, st, hdr, b)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status, gjson.ParseBytes(res.Body)
}

func ciRequest(extra string) string {
	return `{"model":"gpt-5.6","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]` + extra + `}`
}

// turn1Steps are the model's answers to turn 1: a call, then a message.
func turn1Steps(stored bool) []step {
	return []step{
		{items: []string{fcItem("call_t1", turn1Code)}, store: stored},
		{items: []string{msgItem(turn1Text)}, store: stored},
	}
}

// sawTurn1 fails unless the model's input holds turn 1 as the model made
// it: the call with its code, its real output, and the answer.
func sawTurn1(t *testing.T, req gjson.Result) {
	t.Helper()
	var call, output, answer bool
	req.Get("input").ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").Str {
		case "function_call":
			call = call || (it.Get("call_id").Str == "call_t1" && gjson.Get(it.Get("arguments").Str, "code").Str == turn1Code)
		case "function_call_output":
			output = output || (it.Get("call_id").Str == "call_t1" && strings.Contains(it.Get("output").Str, "stdout:\n42\n"))
		case "message":
			answer = answer || strings.Contains(it.Get("content.0.text").Str, turn1Text)
		case "item_reference", "code_interpreter_call":
			t.Errorf("the model got an item it never issued: %s", it.Raw)
		}
		return true
	})
	if !call || !output || !answer {
		t.Errorf("the model was not shown turn 1 (call %v, its output %v, the answer %v): %s", call, output, answer, req.Get("input").Raw)
	}
}

// runTurn1 runs turn 1 buffered for owner and returns the response.
func runTurn1(t *testing.T, ic *Interceptor, up Upstream, owner, extra string) gjson.Result {
	t.Helper()
	st, r := convPost(t, ic, up, owner, ciRequest(`,"input":"What is 6 times 7?","include":["code_interpreter_call.outputs"]`+extra))
	if st != 200 {
		t.Fatalf("turn 1: %d %s", st, r.Raw)
	}
	if !ourRespID.MatchString(r.Get("id").Str) {
		t.Fatalf("turn 1's id %q is not one of ours", r.Get("id").Str)
	}
	return r
}

// TestContinueWithPreviousResponseID: turn 2 names turn 1 by our id; the
// model gets the conversation itself (a model server that stored nothing:
// expand) or its own id of turn 1's last round (one that stored it).
func TestContinueWithPreviousResponseID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    HistoryMode
		stored  bool
		viaPrev bool // the model is sent its own previous_response_id
	}{
		{"auto, model server keeps nothing", HistoryAuto, false, false},
		{"auto, model server keeps responses", HistoryAuto, true, true},
		{"expand", HistoryExpand, true, false},
		{"upstream", HistoryUpstream, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ic, _ := newConvInterceptor(t, func(c *Config) { c.History = tc.mode })
			var up *scriptedUpstream
			turn2 := step{items: []string{msgItem("x was 42.")}, check: func(t *testing.T, req gjson.Result) {
				ids := up.ids
				switch {
				case tc.viaPrev:
					if got := req.Get("previous_response_id").Str; got != ids[len(ids)-1] {
						t.Errorf("previous_response_id %q, want the model's own id of turn 1's last round %q", got, ids[len(ids)-1])
					}
					if n := len(req.Get("input").Array()); n != 1 {
						t.Errorf("input has %d items, want only the new question: %s", n, req.Get("input").Raw)
					}
				default:
					if req.Get("previous_response_id").Exists() {
						t.Errorf("an expanded request still names %s", req.Get("previous_response_id").Raw)
					}
					sawTurn1(t, req)
				}
				in := req.Get("input").Array()
				if last := in[len(in)-1]; last.Get("content").Str != turn2Ask {
					t.Errorf("the new question is not last: %s", last.Raw)
				}
			}}
			up = newScriptedUpstream(t, append(turn1Steps(tc.stored), turn2)...)
			r1 := runTurn1(t, ic, up, "alice", "")
			st, r2 := convPost(t, ic, up, "alice", ciRequest(`,"previous_response_id":"`+r1.Get("id").Str+`","input":"`+turn2Ask+`"`))
			if st != 200 {
				t.Fatalf("turn 2: %d %s", st, r2.Raw)
			}
			if r2.Get("previous_response_id").Str != r1.Get("id").Str || r2.Get("id").Str == r1.Get("id").Str || !ourRespID.MatchString(r2.Get("id").Str) {
				t.Errorf("turn 2: id %s previous_response_id %s, want a new id of ours continuing %s", r2.Get("id").Raw, r2.Get("previous_response_id").Raw, r1.Get("id").Str)
			}
		})
	}
}

// TestContinueAfterLiveStream is the defect the issue found first: a live
// stream announced the first round's id, whose chain ends at an unanswered
// function_call. Now the stream's id is ours, the same from
// response.created to response.completed, and continuing it works.
func TestContinueAfterLiveStream(t *testing.T) {
	ic, _ := newConvInterceptor(t, nil)
	su := newScriptedUpstream(t, append(turn1Steps(false), step{items: []string{msgItem("x was 42.")}, check: func(t *testing.T, req gjson.Result) {
		sawTurn1(t, req)
	}})...)
	w := newRecWriter()
	lu := newLiveUpstream(t, su, w)
	body := ciRequest(`,"stream":true,"input":"What is 6 times 7?"`)
	if err := liveRun(context.Background(), t, ic, lu, []byte(body)); err != nil {
		t.Fatal(err)
	}
	var created, completed string
	for _, ev := range parseSSE(t, string(w.body())) {
		switch ev.Name {
		case "response.created":
			created = ev.Data.Get("response.id").Str
		case "response.completed":
			completed = ev.Data.Get("response.id").Str
		}
	}
	if !ourRespID.MatchString(created) || created != completed {
		t.Fatalf("live stream: created %q, completed %q: want one id of ours", created, completed)
	}
	b := bufferedRun(t, ic, su, []byte(ciRequest(`,"previous_response_id":"`+created+`","input":"`+turn2Ask+`"`)))
	if gjson.GetBytes(b, "output.0.content.0.text").Str != "x was 42." {
		t.Errorf("turn 2: %s", b)
	}
}

// TestReplayedHistoryGetsStoredOutputs: the clients that replay history
// send our items back — by reference (the AI SDK with store: true) or
// whole without their outputs (the Agents SDK's [], LangChain's null).
// Each becomes what the model saw, from the store.
func TestReplayedHistoryGetsStoredOutputs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replay func(r1 gjson.Result) string // turn 1's items as the client sends them back
	}{
		{"item_reference", func(r1 gjson.Result) string {
			var refs []string
			r1.Get("output").ForEach(func(_, it gjson.Result) bool {
				refs = append(refs, `{"type":"item_reference","id":`+jsonx.Quote(it.Get("id").Str)+`}`)
				return true
			})
			return strings.Join(refs, ",")
		}},
		{"outputs []", func(r1 gjson.Result) string { return withoutOutputs(r1, "[]") }},
		{"outputs null", func(r1 gjson.Result) string { return withoutOutputs(r1, "null") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ic, _ := newConvInterceptor(t, nil)
			up := newScriptedUpstream(t, append(turn1Steps(false), step{items: []string{msgItem("x was 42.")}, check: sawTurn1})...)
			r1 := runTurn1(t, ic, up, "alice", "")
			input := `[{"type":"message","role":"user","content":"What is 6 times 7?"},` + tc.replay(r1) + `,{"type":"message","role":"user","content":"` + turn2Ask + `"}]`
			if st, r2 := convPost(t, ic, up, "alice", ciRequest(`,"input":`+input)); st != 200 {
				t.Fatalf("turn 2: %d %s", st, r2.Raw)
			}
		})
	}
}

func withoutOutputs(r1 gjson.Result, outputs string) string {
	var items []string
	r1.Get("output").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "code_interpreter_call" {
			items = append(items, string(jsonx.EditObject(it.Raw, jsonx.Set("outputs", outputs))))
		} else {
			items = append(items, it.Raw)
		}
		return true
	})
	return strings.Join(items, ",")
}

// TestHistoryIsTheOwners: another credential's turn naming alice's
// response, call or conversation gets OpenAI's not-found answers, exactly
// as for ids that never existed, and nothing reaches the model server; a
// model server's own ids still pass to it.
func TestHistoryIsTheOwners(t *testing.T) {
	ctx := context.Background()
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cs := memory.NewConversations(store.DefaultConversationLimits(), nil)
	ic, err := New(DefaultConfig(), sandboxtest.New(t), nil, WithResponses(rs), WithConversations(cs))
	if err != nil {
		t.Fatal(err)
	}
	conv := idgen.NewTagged("conv_", 48)
	if err := cs.PutConversation(ctx, store.Conversation{ID: conv, Owner: "alice", CreatedAt: 1}, nil); err != nil {
		t.Fatal(err)
	}
	up := newScriptedUpstream(t, append(turn1Steps(false), step{items: []string{msgItem("?")}, check: func(t *testing.T, req gjson.Result) {
		if req.Get("previous_response_id").Str != "resp_theirs" || req.Get("input.0.id").Str != "msg_theirs" {
			t.Errorf("the model server's own ids were changed: %s", req.Raw)
		}
	}})...)
	r1 := runTurn1(t, ic, up, "alice", "")
	ci := r1.Get(`output.#(type=="code_interpreter_call").id`).Str
	for _, tc := range []struct {
		name, extra string
		status      int
		param, code string
	}{
		{"her response", `,"previous_response_id":"` + r1.Get("id").Str + `","input":"hi"`, 400, "previous_response_id", "previous_response_not_found"},
		{"a response never made", `,"previous_response_id":"` + idgen.NewTagged("resp_", 50) + `","input":"hi"`, 400, "previous_response_id", "previous_response_not_found"},
		{"her call", `,"input":[{"type":"item_reference","id":"` + ci + `"}]`, 404, "input", ""},
		{"her call, referenced without a type", `,"input":[{"id":"` + ci + `"}]`, 404, "input", ""},
		{"her conversation", `,"conversation":"` + conv + `","input":"hi"`, 404, "conversation", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, r := convPost(t, ic, up, "bob", ciRequest(tc.extra))
			if st != tc.status || r.Get("error.param").Str != tc.param || r.Get("error.code").Str != tc.code || r.Get("error.type").Str != "invalid_request_error" {
				t.Errorf("got %d %s, want %d param %s code %q", st, r.Raw, tc.status, tc.param, tc.code)
			}
		})
	}
	if n := len(up.requests()); n != 2 {
		t.Fatalf("the model server got %d requests, want turn 1's 2", n)
	}
	convPost(t, ic, up, "bob", ciRequest(`,"previous_response_id":"resp_theirs","input":[{"id":"msg_theirs","type":"message","role":"assistant","content":"x"}]`))
}

// TestGoneResponses: a response made with "store": false, deleted, or past
// responses.ttl is OpenAI's 400 previous_response_not_found, from this
// server: a model server that ignores ids it does not know would answer
// without the history.
func TestGoneResponses(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1790000000, 0)
	l := store.DefaultResponseLimits()
	l.TTL = time.Hour
	rs := memory.NewResponses(l, func() time.Time { return now })
	ic, err := New(DefaultConfig(), sandboxtest.New(t), nil, WithResponses(rs))
	if err != nil {
		t.Fatal(err)
	}
	up := newScriptedUpstream(t, append(append(turn1Steps(false), turn1Steps(false)...), turn1Steps(false)...)...)
	unstored := runTurn1(t, ic, up, "alice", `,"store":false`)
	if _, err := rs.GetResponse(ctx, "alice", unstored.Get("id").Str); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a store:false response was kept (%v)", err)
	}
	deleted := runTurn1(t, ic, up, "alice", "")
	if err := rs.DeleteResponse(ctx, "alice", deleted.Get("id").Str); err != nil {
		t.Fatal(err)
	}
	expired := runTurn1(t, ic, up, "alice", "")
	now = now.Add(2 * time.Hour)
	for name, r := range map[string]gjson.Result{"store false": unstored, "deleted": deleted, "expired": expired} {
		st, e := convPost(t, ic, up, "alice", ciRequest(`,"previous_response_id":"`+r.Get("id").Str+`","input":"`+turn2Ask+`"`))
		if st != 400 || e.Get("error.code").Str != "previous_response_not_found" || e.Get("error.message").Str != "Previous response with id '"+r.Get("id").Str+"' not found." {
			t.Errorf("%s: %d %s", name, st, e.Raw)
		}
	}
}

// TestHistoryRefusals: the requests OpenAI refuses, and a history too
// large to send, are refused before anything reaches the model.
func TestHistoryRefusals(t *testing.T) {
	ic, _ := newConvInterceptor(t, func(c *Config) { c.MaxBodyBytes = 2000 })
	up := newScriptedUpstream(t, turn1Steps(false)...)
	r1 := runTurn1(t, ic, up, "alice", "")
	prev := `,"previous_response_id":"` + r1.Get("id").Str + `"`
	for _, tc := range []struct {
		name, extra string
		status      int
		code        string
	}{
		{"with a conversation", prev + `,"conversation":"conv_1","input":"hi"`, 400, "mutually_exclusive_parameters"},
		{"history above the body limit", prev + `,"input":"` + strings.Repeat("a", 1500) + `"`, 400, "context_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, r := convPost(t, ic, up, "alice", ciRequest(tc.extra))
			if st != tc.status || r.Get("error.code").Str != tc.code || r.Get("error.message").Str == "" || r.Get("error.type").Str != "invalid_request_error" {
				t.Errorf("got %d %s, want %d with code %s", st, r.Raw, tc.status, tc.code)
			}
		})
	}
	if n := len(up.requests()); n != 2 {
		t.Errorf("the model got %d requests, want turn 1's 2", n)
	}
}

// TestStoredResponseRecord: what a stored response holds — the object as
// the client got it but with outputs, the input with ids, what the model
// saw of each item, the model server's id.
func TestStoredResponseRecord(t *testing.T) {
	ic, rs := newConvInterceptor(t, nil)
	up := newScriptedUpstream(t, turn1Steps(true)...)
	st, r1 := convPost(t, ic, up, "alice", ciRequest(`,"input":"What is 6 times 7?"`))
	if st != 200 || r1.Get(`output.#(type=="code_interpreter_call").outputs`).Type != gjson.Null {
		t.Fatalf("turn 1: %d %s", st, r1.Raw)
	}
	rec, err := rs.GetResponse(context.Background(), "alice", r1.Get("id").Str)
	if err != nil {
		t.Fatal(err)
	}
	obj := gjson.ParseBytes(rec.Object)
	if obj.Get("id").Str != rec.ID || !strings.Contains(obj.Get(`output.#(type=="code_interpreter_call").outputs.0.logs`).Str, "42") {
		t.Errorf("stored object: %s", rec.Object)
	}
	if rec.UpstreamID != up.ids[len(up.ids)-1] || !rec.UpstreamStored {
		t.Errorf("upstream id %q stored %v, want %q true", rec.UpstreamID, rec.UpstreamStored, up.ids[len(up.ids)-1])
	}
	if len(rec.Input) != 1 || gjson.GetBytes(rec.Input[0], "id").Str == "" || gjson.GetBytes(rec.Input[0], "content").Str != "What is 6 times 7?" {
		t.Errorf("stored input: %s", rec.Input)
	}
	if len(rec.Items) != 2 || !strings.HasPrefix(rec.Items[0].ID, "ci_") || len(rec.Items[0].Model) != 2 ||
		gjson.GetBytes(rec.Items[0].Model[0], "type").Str != "function_call" || !strings.Contains(gjson.GetBytes(rec.Items[0].Model[1], "output").Str, "42") {
		t.Errorf("stored items: %+v", rec.Items)
	}
}

// TestConversationParameter: three turns with "conversation": the model is
// shown the conversation's items each time (turn 3 declares no tool: it is
// still ours to answer, and to append), and the conversation ends holding
// every input and output item in order.
func TestConversationParameter(t *testing.T) {
	ctx := context.Background()
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cs := memory.NewConversations(store.DefaultConversationLimits(), nil)
	ic, err := New(DefaultConfig(), sandboxtest.New(t), nil, WithResponses(rs), WithConversations(cs))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.PutConversation(ctx, store.Conversation{ID: "conv_1", Owner: "alice", CreatedAt: 1}, nil); err != nil {
		t.Fatal(err)
	}
	noConversation := func(t *testing.T, req gjson.Result) {
		if req.Get("conversation").Exists() {
			t.Errorf("the model server got our conversation id: %s", req.Get("conversation").Raw)
		}
	}
	steps := turn1Steps(false)
	steps[0].check = noConversation
	steps = append(steps,
		step{items: []string{msgItem("x was 42.")}, check: func(t *testing.T, req gjson.Result) {
			noConversation(t, req)
			sawTurn1(t, req)
		}},
		step{noTool: true, items: []string{msgItem("Still 42.")}, check: func(t *testing.T, req gjson.Result) {
			noConversation(t, req)
			sawTurn1(t, req)
			if !strings.Contains(req.Get("input").Raw, "x was 42.") {
				t.Errorf("turn 3 was not shown turn 2: %s", req.Get("input").Raw)
			}
		}},
	)
	up := newScriptedUpstream(t, steps...)
	conv := `,"conversation":"conv_1"`
	for k, body := range []string{
		ciRequest(conv + `,"input":"What is 6 times 7?"`),
		ciRequest(conv + `,"input":"` + turn2Ask + `"`),
		`{"model":"gpt-5.6"` + conv + `,"input":"And now?"}`,
	} {
		st, r := convPost(t, ic, up, "alice", body)
		if st != 200 || r.Get("conversation.id").Str != "conv_1" || !ourRespID.MatchString(r.Get("id").Str) {
			t.Fatalf("turn %d: %d %s", k+1, st, r.Raw)
		}
	}
	items, err := cs.Items(ctx, "alice", "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range items {
		kinds = append(kinds, gjson.GetBytes(it.Item, "type").Str+"/"+gjson.GetBytes(it.Item, "role").Str)
	}
	want := "message/user,code_interpreter_call/,message/assistant,message/user,message/assistant,message/user,message/assistant"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("conversation items %s, want %s", got, want)
	}
	if out := gjson.GetBytes(items[1].Item, "outputs.0.logs").Str; !strings.Contains(out, "42") || len(items[1].Model) != 2 {
		t.Errorf("the call's item: %s (model %d items)", items[1].Item, len(items[1].Model))
	}
	// Another credential's request naming it reaches the model server as
	// it is: the conversation is not bob's.
	bob := newScriptedUpstream(t, step{items: []string{msgItem("?")}, check: func(t *testing.T, req gjson.Result) {
		if req.Get("conversation").Str != "conv_1" || strings.Contains(req.Get("input").Raw, "6*7") {
			t.Errorf("bob's request was given alice's conversation: %s", req.Raw)
		}
	}})
	convPost(t, ic, bob, "bob", ciRequest(conv+`,"input":"hi"`))
}

// TestContinueOwesTheModelItsOutputs: a response whose last round's call
// was answered to the client alone (max_tool_calls: 0 kept it from
// running) leaves the model server's chain at an unanswered
// function_call; continuing through that chain sends the owed output
// first, or the model server would refuse it ("No tool output found").
func TestContinueOwesTheModelItsOutputs(t *testing.T) {
	ic, rs := newConvInterceptor(t, nil)
	var up *scriptedUpstream
	up = newScriptedUpstream(t,
		step{items: []string{fcItem("call_t1", turn1Code)}, store: true},
		step{items: []string{msgItem("ok")}, store: true, check: func(t *testing.T, req gjson.Result) {
			if got := req.Get("previous_response_id").Str; got != up.ids[0] {
				t.Errorf("previous_response_id %q, want the model's %q", got, up.ids[0])
			}
			in := req.Get("input").Array()
			if len(in) != 2 || in[0].Get("type").Str != "function_call_output" || in[0].Get("call_id").Str != "call_t1" ||
				!strings.Contains(in[0].Get("output").Str, "not run") || in[1].Get("content").Str != turn2Ask {
				t.Errorf("turn 2's input: %s, want the owed output, then the question", req.Get("input").Raw)
			}
		}},
	)
	st, r1 := convPost(t, ic, up, "alice", ciRequest(`,"input":"What is 6 times 7?","max_tool_calls":0`))
	if st != 200 {
		t.Fatalf("turn 1: %d %s", st, r1.Raw)
	}
	rec, err := rs.GetResponse(context.Background(), "alice", r1.Get("id").Str)
	if err != nil || len(rec.Pending) != 1 || !rec.UpstreamStored {
		t.Fatalf("stored: pending %d, upstream stored %v (%v)", len(rec.Pending), rec.UpstreamStored, err)
	}
	if st, r2 := convPost(t, ic, up, "alice", ciRequest(`,"previous_response_id":"`+r1.Get("id").Str+`","input":"`+turn2Ask+`"`)); st != 200 {
		t.Fatalf("turn 2: %d %s", st, r2.Raw)
	}
}
