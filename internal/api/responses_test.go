package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// responsesEnv is the API with a response store and a model server behind
// it that answers for the ids it issued.
type responsesEnv struct {
	*env
	rs    *memory.Responses
	model *fakeModel
}

// fakeModel is a model server's /v1/responses/{id} routes: it knows one
// response, resp_model, and records what reached it.
type fakeModel struct {
	mu  sync.Mutex
	got []*http.Request
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.got = append(m.got, r.Clone(context.Background()))
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/v1/responses/resp_model" || r.Header.Get("Authorization") != "Bearer k-alice" {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"Response with id '%s' not found.","type":"invalid_request_error","param":null,"code":null}}`, strings.TrimPrefix(r.URL.Path, "/v1/responses/"))
		return
	}
	_, _ = io.WriteString(w, `{"id":"resp_model","object":"response","created_at":1,"status":"completed","model":"m","output":[],"tools":[],"tool_choice":"auto","parallel_tool_calls":true,"temperature":1,"top_p":1,"metadata":{},"instructions":null,"error":null,"incomplete_details":null}`)
}

func (m *fakeModel) requests() []*http.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*http.Request(nil), m.got...)
}

func newResponsesEnv(t *testing.T) *responsesEnv {
	t.Helper()
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	model := &fakeModel{}
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	e := newEnv(t, func(c *api.Config) {
		c.Responses = rs
		c.ResponsesUpstreamURL = ms.URL + "/v1/responses"
		c.ForwardHeaders = []string{"authorization"}
	})
	return &responsesEnv{env: e, rs: rs, model: model}
}

func ownerOf(key string) string {
	o, _ := store.Owner(http.Header{"Authorization": {"Bearer " + key}}, []string{"authorization", "api-key"})
	return o
}

const storedObject = `{"id":"resp_ours","object":"response","created_at":1790000000,"status":"completed","model":"gpt-5.6",` +
	`"output":[{"id":"ci_1","type":"code_interpreter_call","status":"completed","code":"print(6*7)","container_id":"cntr_1","outputs":[{"type":"logs","logs":"42\n"}]},` +
	`{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"42","annotations":[]}]}],` +
	`"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"tool_choice":"auto","parallel_tool_calls":true,"temperature":1,"top_p":1,"metadata":{},"instructions":null,"error":null,"incomplete_details":null}`

// put stores resp_ours for alice with n input items msg_in0…
func (e *responsesEnv) put(t *testing.T, n int) {
	t.Helper()
	rec := store.Response{ID: "resp_ours", Owner: ownerOf("k-alice"), Object: json.RawMessage(storedObject)}
	for k := range n {
		rec.Input = append(rec.Input, json.RawMessage(fmt.Sprintf(`{"id":"msg_in%d","type":"message","role":"user","content":[{"type":"input_text","text":"q%d"}]}`, k, k)))
	}
	if err := e.rs.PutResponse(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// TestStoredResponsesThroughOpenAIGo: openai-go reads, lists and deletes a
// stored response; outputs only with include, as OpenAI shows them.
func TestStoredResponsesThroughOpenAIGo(t *testing.T) {
	e := newResponsesEnv(t)
	e.put(t, 3)
	ctx := context.Background()
	c := e.client("k-alice")

	r, err := c.Responses.Get(ctx, "resp_ours", responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "resp_ours" || len(r.Output) != 2 || r.Output[0].Type != "code_interpreter_call" || len(r.Output[0].Outputs) != 0 {
		t.Errorf("without include: %s", r.RawJSON())
	}
	r, err = c.Responses.Get(ctx, "resp_ours", responses.ResponseGetParams{Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}})
	if err != nil {
		t.Fatal(err)
	}
	if o := r.Output[0].Outputs; len(o) != 1 || o[0].Logs != "42\n" {
		t.Errorf("with include: %s", r.RawJSON())
	}

	// Pages of two, newest first (the default), then oldest first.
	var ids []string
	page, err := c.Responses.InputItems.List(ctx, "resp_ours", responses.InputItemListParams{Limit: openai.Int(2)})
	for err == nil && page != nil {
		for _, it := range page.Data {
			ids = append(ids, it.ID)
		}
		page, err = page.GetNextPage()
	}
	if err != nil || strings.Join(ids, ",") != "msg_in2,msg_in1,msg_in0" {
		t.Errorf("input items desc: %v %v", ids, err)
	}
	asc, err := c.Responses.InputItems.List(ctx, "resp_ours", responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc, After: openai.String("msg_in0")})
	if err != nil || len(asc.Data) != 2 || asc.Data[0].ID != "msg_in1" || asc.HasMore {
		t.Errorf("input items asc after msg_in0: %+v %v", asc, err)
	}

	if err := c.Responses.Delete(ctx, "resp_ours"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rs.GetResponse(ctx, ownerOf("k-alice"), "resp_ours"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	_, err = c.Responses.Get(ctx, "resp_ours", responses.ResponseGetParams{})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || !strings.Contains(ae.Message, "resp_ours") {
		t.Errorf("get after delete: %v", err)
	}
}

// TestStoredResponsesAreTheOwners: another credential reading, listing or
// deleting alice's response gets the model server's 404, and her response
// stays.
func TestStoredResponsesAreTheOwners(t *testing.T) {
	e := newResponsesEnv(t)
	e.put(t, 1)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/responses/resp_ours"},
		{http.MethodGet, "/v1/responses/resp_ours/input_items"},
		{http.MethodDelete, "/v1/responses/resp_ours"},
	} {
		st, _, body := e.do(tc.method, tc.path, "k-bob", "", nil)
		checkError(t, st, body, http.StatusNotFound, "", "resp_ours")
	}
	if _, err := e.rs.GetResponse(context.Background(), ownerOf("k-alice"), "resp_ours"); err != nil {
		t.Errorf("bob's delete removed alice's response: %v", err)
	}
	if st, _, body := e.do(http.MethodGet, "/v1/responses/resp_ours", "k-alice", "", nil); st != 200 || !strings.Contains(string(body), `"ci_1"`) {
		t.Errorf("alice: %d %s", st, body)
	}
}

// TestForeignResponsesPassToTheModelServer: an id this server did not
// issue is the model server's: the request reaches it with the caller's
// credential and its answer comes back unchanged.
func TestForeignResponsesPassToTheModelServer(t *testing.T) {
	e := newResponsesEnv(t)
	r, err := e.client("k-alice").Responses.Get(context.Background(), "resp_model", responses.ResponseGetParams{})
	if err != nil || r.ID != "resp_model" {
		t.Fatalf("the model server's response: %v %v", r, err)
	}
	got := e.model.requests()
	if len(got) != 1 || got[0].Method != http.MethodGet || got[0].URL.Path != "/v1/responses/resp_model" || got[0].Header.Get("Authorization") != "Bearer k-alice" {
		t.Errorf("the model server got %+v", got)
	}
	st, _, body := e.do(http.MethodGet, "/v1/responses/resp_unknown?include[]=x", "k-alice", "", nil)
	checkError(t, st, body, http.StatusNotFound, "", "resp_unknown")
	if got := e.model.requests(); got[len(got)-1].URL.RawQuery != "include[]=x" {
		t.Errorf("query not passed: %q", got[len(got)-1].URL.RawQuery)
	}
	// An id of ours that is gone is this server's 404: the model server
	// never made it.
	gone := idgen.NewTagged("resp_", 50)
	n := len(e.model.requests())
	st, _, body = e.do(http.MethodGet, "/v1/responses/"+gone, "k-alice", "", nil)
	checkError(t, st, body, http.StatusNotFound, "", "Response with id '"+gone+"' not found.")
	if len(e.model.requests()) != n {
		t.Errorf("a gone response of ours was asked of the model server")
	}
}

// TestStoredResponsesWithoutModelServer: without an upstream URL an
// unknown id is this server's own 404.
func TestStoredResponsesWithoutModelServer(t *testing.T) {
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	e := newEnv(t, func(c *api.Config) { c.Responses = rs })
	st, _, body := e.do(http.MethodGet, "/v1/responses/resp_nope", "k-alice", "", nil)
	checkError(t, st, body, http.StatusNotFound, "", "Response with id 'resp_nope' not found.")
	st, _, body = e.do(http.MethodPost, "/v1/responses/resp_nope", "k-alice", "", nil)
	if st != http.StatusMethodNotAllowed {
		t.Errorf("POST on a stored response: %d %s", st, body)
	}
}
