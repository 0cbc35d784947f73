package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAIGoConversations is TestNodeClients' conversation — a
// computation, a Python exception, a question about the first result —
// held by openai-go through the whole stack, in each way the client can
// carry it on: previous_response_id, its own output items replayed,
// item_reference, and the Conversations API; streamed and not; against a
// model server with state and one without. In every turn the model must be
// shown the real earlier code and outputs (checkModelViews).
func TestOpenAIGoConversations(t *testing.T) {
	sh := loadShapes(t)
	for _, tc := range []struct {
		name      string
		mode      string // "previous_response_id", "history", "item_reference", "conversation"
		stream    bool
		include   bool
		stateless bool
		noTool3   bool // turn 3, a question, declares no tool (it is still ours: the conversation is)
	}{
		{name: "previous_response_id", mode: "previous_response_id", include: true},
		{name: "previous_response_id+stream", mode: "previous_response_id", stream: true},
		{name: "history", mode: "history"},
		{name: "history+stream+include", mode: "history", stream: true, include: true},
		{name: "item_reference+stream", mode: "item_reference", stream: true},
		{name: "conversation", mode: "conversation", include: true},
		{name: "conversation+stream", mode: "conversation", stream: true},
		{name: "previous_response_id+stream, turn 3 without the tool", mode: "previous_response_id", stream: true, noTool3: true},
		{name: "stateless/conversation+stream, turn 3 without the tool", mode: "conversation", stream: true, stateless: true, noTool3: true},
		{name: "stateless/previous_response_id+stream", mode: "previous_response_id", stream: true, stateless: true},
		{name: "stateless/item_reference", mode: "item_reference", stateless: true},
		{name: "stateless/conversation", mode: "conversation", stateless: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m *model
			s := newStack(t, sh, nodeScript(&m), stackOptions{stateless: tc.stateless, containers: tc.mode == "conversation"})
			m = s.model
			ctx := context.Background()
			c := openai.NewClient(option.WithBaseURL(s.proxyURL+"/v1/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))

			var conv *conversations.Conversation
			if tc.mode == "conversation" {
				var err error
				if conv, err = c.Conversations.New(ctx, conversations.ConversationNewParams{}); err != nil {
					t.Fatal(err)
				}
			}
			var history []responses.ResponseInputItemUnionParam
			var prev string
			for k, prompt := range nodePrompts {
				p := responses.ResponseNewParams{
					Model: "gpt-5.6",
					Tools: []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{})},
				}
				if tc.noTool3 && k == 2 {
					p.Tools = nil
				}
				if tc.include {
					p.Include = []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}
				}
				user := responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
					Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(prompt)}}}
				switch tc.mode {
				case "previous_response_id":
					if prev != "" {
						p.PreviousResponseID = openai.String(prev)
					}
					p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}
				case "conversation":
					p.Conversation = responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}
					p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}
				default:
					history = append(history, user)
					p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: history}
				}
				r := create(t, ctx, &c, p, tc.stream)
				prev = r.ID
				checkTurn(t, k, r, tc.include)
				if tc.mode == "conversation" && r.Conversation.ID != conv.ID {
					t.Errorf("turn %d: the response names conversation %q, want %q", k+1, r.Conversation.ID, conv.ID)
				}
				for _, it := range r.Output {
					switch {
					case tc.mode == "item_reference":
						history = append(history, responses.ResponseInputItemUnionParam{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: it.ID}})
					case it.Type == "code_interpreter_call":
						ci := it.AsCodeInterpreterCall().ToParam()
						history = append(history, responses.ResponseInputItemUnionParam{OfCodeInterpreterCall: &ci})
					case it.Type == "message":
						msg := it.AsMessage().ToParam()
						history = append(history, responses.ResponseInputItemUnionParam{OfOutputMessage: &msg})
					}
				}
			}
			checkModelViews(t, m, tc.stateless)

			if tc.mode != "conversation" {
				return
			}
			// The conversation holds the three turns, and the stored
			// response reads back as the client got it.
			page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc, Limit: openai.Int(100)})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, it := range page.Data {
				kinds = append(kinds, it.Type)
			}
			if got, want := strings.Join(kinds, ","), "message,code_interpreter_call,message,message,code_interpreter_call,message,message,message"; got != want {
				t.Errorf("conversation items %s, want %s", got, want)
			}
			got, err := c.Responses.Get(ctx, prev, responses.ResponseGetParams{})
			if err != nil || got.ID != prev || got.OutputText() != "The first result was 42." {
				t.Errorf("GET the last response: %v %v", got, err)
			}
		})
	}
}

// create makes one response, streamed (read with openai-go's stream, to
// its response.completed) or not.
func create(t *testing.T, ctx context.Context, c *openai.Client, p responses.ResponseNewParams, stream bool) *responses.Response {
	t.Helper()
	if !stream {
		r, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	st := c.Responses.NewStreaming(ctx, p)
	var created string
	var done *responses.Response
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.created":
			created = ev.Response.ID
		case "response.completed":
			r := ev.Response
			done = &r
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if done == nil || done.ID != created {
		t.Fatalf("stream: created %q, completed %v: want one response with one id", created, done)
	}
	return done
}

// checkTurn: turn k's calls, their code, status and outputs, and turn 3's
// answer, as openai-go decoded them.
func checkTurn(t *testing.T, k int, r *responses.Response, include bool) {
	t.Helper()
	var calls []responses.ResponseCodeInterpreterToolCall
	for _, it := range r.Output {
		if it.Type == "code_interpreter_call" {
			calls = append(calls, it.AsCodeInterpreterCall())
		}
	}
	if k == 2 {
		if len(calls) != 0 || !strings.Contains(r.OutputText(), "42") {
			t.Errorf("turn 3: %d calls, answer %q: want no call and the first result, 42", len(calls), r.OutputText())
		}
		return
	}
	code, logs := []string{nodeCode1, nodeCode2}[k], []string{"42", "ZeroDivisionError"}[k]
	if len(calls) != 1 || calls[0].Code != code || calls[0].Status != "completed" {
		t.Fatalf("turn %d: calls %+v, want one completed call of %q", k+1, calls, code)
	}
	var out string
	for _, o := range calls[0].Outputs {
		out += o.Logs
	}
	if include != strings.Contains(out, logs) {
		t.Errorf("turn %d: outputs %q (include %v), want logs with %q exactly when included", k+1, out, include, logs)
	}
}
