package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

func newConversationsEnv(t *testing.T) (*env, *memory.Responses) {
	t.Helper()
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cs := memory.NewConversations(store.DefaultConversationLimits(), nil)
	return newEnv(t, func(c *api.Config) { c.Responses, c.Conversations = rs, cs }), rs
}

func userItem(text string) conversations.ItemNewParams {
	return conversations.ItemNewParams{Items: []responses.ResponseInputItemUnionParam{userParam(text)}}
}

func userParam(text string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
		Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(text)}}}
}

// TestConversationsThroughOpenAIGo: the whole Conversations API as
// openai-go drives it.
func TestConversationsThroughOpenAIGo(t *testing.T) {
	e, _ := newConversationsEnv(t)
	ctx := context.Background()
	c := e.client("k-alice")

	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{
		Items:    []responses.ResponseInputItemUnionParam{userParam("first")},
		Metadata: shared.Metadata{"topic": "demo"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(conv.ID, "conv_") || conv.Object != "conversation" || conv.CreatedAt != e.clock.Now().Unix() {
		t.Errorf("created: %s", conv.RawJSON())
	}
	got, err := c.Conversations.Get(ctx, conv.ID)
	if err != nil || !strings.Contains(got.RawJSON(), `"topic":"demo"`) {
		t.Fatalf("get: %v %v", got, err)
	}
	upd, err := c.Conversations.Update(ctx, conv.ID, conversations.ConversationUpdateParams{Metadata: shared.Metadata{"topic": "other"}})
	if err != nil || !strings.Contains(upd.RawJSON(), `"topic":"other"`) {
		t.Fatalf("update: %v %v", upd, err)
	}

	for k := range 4 {
		if _, err := c.Conversations.Items.New(ctx, conv.ID, userItem(fmt.Sprint("more ", k))); err != nil {
			t.Fatal(err)
		}
	}
	// Newest first by default; the SDK pages with last_id.
	var texts []string
	iter := c.Conversations.Items.ListAutoPaging(ctx, conv.ID, conversations.ItemListParams{Limit: openai.Int(2)})
	for iter.Next() {
		it := iter.Current()
		texts = append(texts, it.AsMessage().Content[0].Text)
	}
	if err := iter.Err(); err != nil || strings.Join(texts, ",") != "more 3,more 2,more 1,more 0,first" {
		t.Errorf("items newest first: %v %v", texts, err)
	}
	page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc, Limit: openai.Int(1)})
	if err != nil || len(page.Data) != 1 || !page.HasMore || page.Data[0].AsMessage().Content[0].Text != "first" || page.Data[0].AsMessage().Status != "completed" {
		t.Fatalf("oldest first: %+v %v", page, err)
	}
	first := page.Data[0].ID
	it, err := c.Conversations.Items.Get(ctx, conv.ID, first, conversations.ItemGetParams{})
	if err != nil || it.ID != first {
		t.Fatalf("get item: %v %v", it, err)
	}
	after, err := c.Conversations.Items.Delete(ctx, conv.ID, first)
	if err != nil || after.ID != conv.ID {
		t.Fatalf("delete item: %v %v", after, err)
	}
	if _, err := c.Conversations.Items.Get(ctx, conv.ID, first, conversations.ItemGetParams{}); !isStatus(err, 404) {
		t.Errorf("deleted item: %v", err)
	}
	del, err := c.Conversations.Delete(ctx, conv.ID)
	if err != nil || !del.Deleted || del.Object != "conversation.deleted" {
		t.Fatalf("delete: %v %v", del, err)
	}
	if _, err := c.Conversations.Get(ctx, conv.ID); !isStatus(err, 404) {
		t.Errorf("deleted conversation: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var ae *openai.Error
	return errors.As(err, &ae) && ae.StatusCode == status
}

// TestConversationsAreTheOwners: bob reaches nothing of alice's
// conversation, and his deletes leave it whole.
func TestConversationsAreTheOwners(t *testing.T) {
	e, _ := newConversationsEnv(t)
	ctx := context.Background()
	conv, err := e.client("k-alice").Conversations.New(ctx, conversations.ConversationNewParams{Items: []responses.ResponseInputItemUnionParam{userParam("mine")}})
	if err != nil {
		t.Fatal(err)
	}
	items, err := e.client("k-alice").Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{})
	if err != nil || len(items.Data) != 1 {
		t.Fatal(items, err)
	}
	item := items.Data[0].ID
	base := "/v1/conversations/" + conv.ID
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, base, ""},
		{http.MethodPost, base, `{"metadata":{"a":"b"}}`},
		{http.MethodDelete, base, ""},
		{http.MethodGet, base + "/items", ""},
		{http.MethodPost, base + "/items", `{"items":[{"role":"user","content":"theirs"}]}`},
		{http.MethodGet, base + "/items/" + item, ""},
		{http.MethodDelete, base + "/items/" + item, ""},
	} {
		var body *strings.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		var st int
		var out []byte
		if body != nil {
			st, _, out = e.do(tc.method, tc.path, "k-bob", "application/json", body)
		} else {
			st, _, out = e.do(tc.method, tc.path, "k-bob", "", nil)
		}
		if st != http.StatusNotFound {
			t.Errorf("bob %s %s: %d %s", tc.method, tc.path, st, out)
		}
	}
	items, err = e.client("k-alice").Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{})
	if err != nil || len(items.Data) != 1 || items.Data[0].ID != item {
		t.Errorf("alice's conversation after bob: %v %v", items, err)
	}
}

// TestConversationBadInput: what OpenAI bounds is refused with its error
// shape, and nothing is written.
func TestConversationBadInput(t *testing.T) {
	e, _ := newConversationsEnv(t)
	many := make([]string, 21)
	for k := range many {
		many[k] = `{"role":"user","content":"m"}`
	}
	md := map[string]string{}
	for k := range 17 {
		md[fmt.Sprint("k", k)] = "v"
	}
	mdJSON, _ := json.Marshal(md)
	for _, tc := range []struct{ name, body, param string }{
		{"21 items", `{"items":[` + strings.Join(many, ",") + `]}`, "items"},
		{"17 metadata pairs", `{"metadata":` + string(mdJSON) + `}`, "metadata"},
		{"a metadata value not a string", `{"metadata":{"a":1}}`, "metadata.a"},
		{"unknown parameter", `{"itemz":[]}`, "itemz"},
		{"items not an array", `{"items":{}}`, "items"},
		{"an item without a type or role", `{"items":[{"content":"x"}]}`, "items[0].type"},
		{"two items with one id", `{"items":[{"id":"msg_a","type":"message","role":"user","content":"x"},{"id":"msg_a","type":"message","role":"user","content":"y"}]}`, "items[1].id"},
		{"an item_reference to nothing", `{"items":[{"type":"item_reference","id":"ci_none"}]}`, "items[0].id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := e.do(http.MethodPost, "/v1/conversations", "k-alice", "application/json", strings.NewReader(tc.body))
			want := http.StatusBadRequest
			if strings.Contains(tc.name, "item_reference") {
				want = http.StatusNotFound
			}
			checkError(t, st, body, want, tc.param, "")
		})
	}
}

// TestConversationItemReference: an item_reference to an item of one of
// the caller's stored responses adds that item, outputs shown only when
// included.
func TestConversationItemReference(t *testing.T) {
	e, rs := newConversationsEnv(t)
	ctx := context.Background()
	if err := rs.PutResponse(ctx, store.Response{ID: "resp_ours", Owner: ownerOf("k-alice"), Object: json.RawMessage(storedObject),
		Items: []store.ResponseItem{{ID: "ci_1", Model: []json.RawMessage{json.RawMessage(`{"type":"function_call","call_id":"c","name":"code_interpreter","arguments":"{}"}`)}}}}); err != nil {
		t.Fatal(err)
	}
	c := e.client("k-alice")
	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{Items: []responses.ResponseInputItemUnionParam{
		{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: "ci_1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Conversations.Items.Get(ctx, conv.ID, "ci_1", conversations.ItemGetParams{})
	if err != nil || plain.Type != "code_interpreter_call" || len(plain.AsCodeInterpreterCall().Outputs) != 0 {
		t.Fatalf("without include: %v %v", plain, err)
	}
	full, err := c.Conversations.Items.Get(ctx, conv.ID, "ci_1", conversations.ItemGetParams{Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}})
	if err != nil || len(full.AsCodeInterpreterCall().Outputs) != 1 || full.AsCodeInterpreterCall().Outputs[0].Logs != "42\n" {
		t.Fatalf("with include: %v %v", full, err)
	}
	// Bob cannot reference alice's item.
	st, _, body := e.do(http.MethodPost, "/v1/conversations", "k-bob", "application/json", strings.NewReader(`{"items":[{"type":"item_reference","id":"ci_1"}]}`))
	checkError(t, st, body, http.StatusNotFound, "items[0].id", "ci_1")
}
