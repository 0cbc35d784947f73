package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// routeEnv is an API server with one object of every kind, owned by
// k-alice, and a model server behind /v1/responses that records what
// reaches it.
type routeEnv struct {
	*env
	model *fakeModel
	// ids of the objects: container, its file, a Files API file, a
	// conversation and its item.
	vars map[string]string
	// owner is the key the objects are made with ("" when anonymous).
	owner string
}

// The configurations the route table runs under.
const (
	cfgFull          = "full"           // responses with a model server, conversations, local files
	cfgNoUpstream    = "no-upstream"    // responses without a model server
	cfgBare          = "bare"           // neither responses nor conversations
	cfgFilesOff      = "files-off"      // files.source: off
	cfgFilesUpstream = "files-upstream" // files.source: upstream
	cfgAnonymous     = "anonymous"      // api.anonymous: shared
)

func newRouteEnv(t *testing.T, config string) *routeEnv {
	t.Helper()
	model := &fakeModel{}
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cs := memory.NewConversations(store.DefaultConversationLimits(), nil)
	files := http.NewServeMux() // the Files API upstream: it has no files
	fs := httptest.NewServer(files)
	t.Cleanup(fs.Close)
	e := newEnv(t, func(c *api.Config) {
		switch config {
		case cfgFull, cfgAnonymous:
			c.Responses, c.Conversations = rs, cs
			c.ResponsesUpstreamURL = ms.URL + "/v1/responses"
			c.ForwardHeaders = []string{"authorization"}
			if config == cfgAnonymous {
				c.Anonymous = api.AnonymousShared
			}
		case cfgNoUpstream:
			c.Responses = rs
		case cfgFilesOff:
			c.FilesSource = api.FilesOff
		case cfgFilesUpstream:
			c.FilesSource, c.FilesUpstreamURL = api.FilesUpstream, fs.URL+"/v1"
		}
	})
	re := &routeEnv{env: e, model: model, vars: map[string]string{}, owner: "k-alice"}
	if config == cfgAnonymous {
		re.owner = ""
	}
	re.vars["{ours}"] = idgen.NewTagged("resp_", 50) // an id of this server's that it does not hold
	re.vars["{c}"] = re.create(t, "POST", "/v1/containers", "application/json", strings.NewReader(`{"name":"r"}`))
	ct, body := multipartBody(t, nil, "a.txt", []byte("container bytes"))
	re.vars["{cf}"] = re.create(t, "POST", "/v1/containers/"+re.vars["{c}"]+"/files", ct, body)
	if config != cfgFilesOff && config != cfgFilesUpstream {
		ct, body = multipartBody(t, map[string]string{"purpose": "user_data"}, "b.txt", []byte("file bytes"))
		re.vars["{f}"] = re.create(t, "POST", "/v1/files", ct, body)
	}
	if config == cfgFull || config == cfgAnonymous {
		re.vars["{conv}"] = re.create(t, "POST", "/v1/conversations", "application/json",
			strings.NewReader(`{"items":[{"type":"message","role":"user","content":"hi"}]}`))
		_, _, list := re.do("GET", "/v1/conversations/"+re.vars["{conv}"]+"/items", re.owner, "", nil)
		var l struct{ Data []struct{ ID string } }
		if err := json.Unmarshal(list, &l); err != nil || len(l.Data) != 1 {
			t.Fatalf("conversation items: %v %s", err, list)
		}
		re.vars["{item}"] = l.Data[0].ID
	}
	if config == cfgFull || config == cfgAnonymous || config == cfgNoUpstream {
		owner := ownerOf("k-alice")
		if config == cfgAnonymous {
			owner, _ = store.Owner(http.Header{}, []string{"authorization", "api-key"})
		}
		rec := store.Response{ID: "resp_ours", Owner: owner, Object: json.RawMessage(storedObject),
			Input: []json.RawMessage{json.RawMessage(`{"id":"msg_in0","type":"message","role":"user","content":"q"}`)}}
		if err := rs.PutResponse(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	return re
}

// create makes an object as k-alice (or anonymously when the env shares
// one owner) and returns its id.
func (e *routeEnv) create(t *testing.T, method, path, ctype string, body io.Reader) string {
	t.Helper()
	status, _, got := e.do(method, path, e.owner, ctype, body)
	var obj struct{ ID string }
	if err := json.Unmarshal(got, &obj); status != 200 || err != nil || obj.ID == "" {
		t.Fatalf("%s %s: %d %s", method, path, status, got)
	}
	return obj.ID
}

func (e *routeEnv) expand(s string) string {
	for k, v := range e.vars {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

// routeCase is one request and what answers it.
type routeCase struct {
	config       string
	method, path string
	key          string // "" sends no credential
	ctype, body  string
	status       int
	// want is a fragment of the answer's body; with exact, the whole body.
	want  string
	exact bool
	allow string // the Allow header ("" = none)
	// upstream is the escaped path the model server got ("" = it got
	// nothing).
	upstream string
}

// unknownURL and notAllowed are the exact answers to a path no route
// takes and to a method its route does not serve.
func unknownURL(method, path string) string {
	return `{"error":{"message":"Invalid URL (` + method + ` ` + path + `)","type":"invalid_request_error","param":null,"code":"unknown_url"}}` + "\n"
}

func notAllowed(method, path, use string) string {
	return `{"error":{"message":"Method ` + method + ` is not allowed on ` + path + `; use ` + use + `.","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}` + "\n"
}

func filesUnsupported(source string) string {
	msg := "The Files API is not supported by this server (files.source: off)."
	if source == "upstream" {
		msg = "The Files API is served by the upstream provider, not by this server (files.source: upstream)."
	}
	return `{"error":{"message":"` + msg + `","type":"invalid_request_error","param":null,"code":"unsupported"}}` + "\n"
}

const noCredentialAnswer = `{"error":{"message":"` + apierror.NoCredentialMessage + `","type":"invalid_request_error","param":null,"code":null}}` + "\n"

// TestRoutes: every endpoint reaches its handler with its ids, and every
// request no endpoint takes gets OpenAI's error: 404 unknown_url for a
// path, 405 method_not_allowed with Allow for a method, the model server's
// answer for what /v1/responses/ does not hold. Ids are the decoded path's
// segments: an encoded slash separates segments as a slash does, and dot
// segments are ids, not path steps.
func TestRoutes(t *testing.T) {
	const a = "k-alice"
	cases := []routeCase{
		// Every endpoint.
		{config: cfgFull, method: "GET", path: "/v1/containers", key: a, status: 200, want: `"id":"{c}"`},
		{config: cfgFull, method: "POST", path: "/v1/containers", key: a, ctype: "application/json", body: `{"name":"n"}`, status: 200, want: `"name":"n"`},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}", key: a, status: 200, want: `"object":"container"`},
		{config: cfgFull, method: "DELETE", path: "/v1/containers/{c}", key: a, status: 200, want: `"object":"container.deleted"`},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files", key: a, status: 200, want: `"id":"{cf}"`},
		{config: cfgFull, method: "POST", path: "/v1/containers/{c}/files", key: a, ctype: "application/json", body: `{"file_id":"{f}"}`, status: 200, want: `"source":"user"`},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/{cf}", key: a, status: 200, want: `"path":"/mnt/data/a.txt"`},
		{config: cfgFull, method: "DELETE", path: "/v1/containers/{c}/files/{cf}", key: a, status: 200, want: `"object":"container.file.deleted"`},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/{cf}/content", key: a, status: 200, want: "container bytes", exact: true},
		{config: cfgFull, method: "GET", path: "/v1/files", key: a, status: 200, want: `"id":"{f}"`},
		{config: cfgFull, method: "POST", path: "/v1/files", key: a, ctype: "multipart", status: 200, want: `"filename":"up.txt"`},
		{config: cfgFull, method: "GET", path: "/v1/files/{f}", key: a, status: 200, want: `"filename":"b.txt"`},
		{config: cfgFull, method: "DELETE", path: "/v1/files/{f}", key: a, status: 200, want: `"deleted":true`},
		{config: cfgFull, method: "GET", path: "/v1/files/{f}/content", key: a, status: 200, want: "file bytes", exact: true},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_ours", key: a, status: 200, want: `"outputs":null`},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_ours/input_items", key: a, status: 200, want: `"id":"msg_in0"`},
		{config: cfgFull, method: "DELETE", path: "/v1/responses/resp_ours", key: a, status: 200, want: `"object":"response","deleted":true`},
		{config: cfgFull, method: "POST", path: "/v1/conversations", key: a, ctype: "application/json", body: `{}`, status: 200, want: `"object":"conversation"`},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}", key: a, status: 200, want: `"id":"{conv}"`},
		{config: cfgFull, method: "POST", path: "/v1/conversations/{conv}", key: a, ctype: "application/json", body: `{"metadata":{"k":"v"}}`, status: 200, want: `"metadata":{"k":"v"}`},
		{config: cfgFull, method: "DELETE", path: "/v1/conversations/{conv}", key: a, status: 200, want: `"object":"conversation.deleted"`},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/items", key: a, status: 200, want: `"id":"{item}"`},
		{config: cfgFull, method: "POST", path: "/v1/conversations/{conv}/items", key: a, ctype: "application/json", body: `{"items":[{"type":"message","role":"user","content":"more"}]}`, status: 200, want: `"text":"more"`},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/items/{item}", key: a, status: 200, want: `"text":"hi"`},
		{config: cfgFull, method: "DELETE", path: "/v1/conversations/{conv}/items/{item}", key: a, status: 200, want: `"id":"{conv}","object":"conversation"`},
		// Credentials: checked once a route takes the request, and not
		// for what answers an unmatched path or method.
		{config: cfgFull, method: "GET", path: "/v1/containers", status: 401, want: noCredentialAnswer, exact: true},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_model", status: 401, want: noCredentialAnswer, exact: true},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/items/{item}", status: 401, want: noCredentialAnswer, exact: true},
		{config: cfgFull, method: "PUT", path: "/v1/containers", status: 405, want: notAllowed("PUT", "/v1/containers", "GET or POST"), exact: true, allow: "GET, POST"},
		{config: cfgFull, method: "GET", path: "/v1/nothing", status: 404, want: unknownURL("GET", "/v1/nothing"), exact: true},
		{config: cfgAnonymous, method: "GET", path: "/v1/containers/{c}", status: 200, want: `"id":"{c}"`},
		{config: cfgAnonymous, method: "GET", path: "/v1/responses/resp_ours", status: 200, want: `"id":"resp_ours"`},
		// Another owner's ids are not found.
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/{cf}/content", key: "k-bob", status: 404, want: "No container found with id '{c}'."},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}", key: "k-bob", status: 404, want: "{conv}"},
		{config: cfgFull, method: "GET", path: "/v1/files/{f}", key: "k-bob", status: 404, want: "No file found with id '{f}'."},

		// Paths no route takes.
		{config: cfgFull, method: "GET", path: "/", key: a, status: 404, want: unknownURL("GET", "/"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1", key: a, status: 404, want: unknownURL("GET", "/v1"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/", key: a, status: 404, want: unknownURL("GET", "/v1/"), exact: true},
		{config: cfgFull, method: "GET", path: "/containers", key: a, status: 404, want: unknownURL("GET", "/containers"), exact: true},
		{config: cfgFull, method: "GET", path: "/v2/containers", key: a, status: 404, want: unknownURL("GET", "/v2/containers"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/", key: a, status: 404, want: unknownURL("GET", "/v1/containers/"), exact: true},
		{config: cfgFull, method: "POST", path: "/v1/containers/", key: a, status: 404, want: unknownURL("POST", "/v1/containers/"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1//containers", key: a, status: 404, want: unknownURL("GET", "/v1//containers"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers//files", key: a, status: 404, want: unknownURL("GET", "/v1/containers//files"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/", key: a, status: 404, want: unknownURL("GET", "/v1/containers/{c}/files/"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/things", key: a, status: 404, want: unknownURL("GET", "/v1/containers/{c}/things"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/{cf}/bytes", key: a, status: 404, want: unknownURL("GET", "/v1/containers/{c}/files/{cf}/bytes"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/{cf}/content/x", key: a, status: 404, want: unknownURL("GET", "/v1/containers/{c}/files/{cf}/content/x"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/files/{f}/x", key: a, status: 404, want: unknownURL("GET", "/v1/files/{f}/x"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/files/{f}/content/x", key: a, status: 404, want: unknownURL("GET", "/v1/files/{f}/content/x"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/other", key: a, status: 404, want: unknownURL("GET", "/v1/conversations/{conv}/other"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/items/{item}/x", key: a, status: 404, want: unknownURL("GET", "/v1/conversations/{conv}/items/{item}/x"), exact: true},
		{config: cfgFull, method: "PUT", path: "/v1/things/x", status: 404, want: unknownURL("PUT", "/v1/things/x"), exact: true},
		{config: cfgBare, method: "GET", path: "/v1/responses/resp_ours", key: a, status: 404, want: unknownURL("GET", "/v1/responses/resp_ours"), exact: true},
		{config: cfgBare, method: "POST", path: "/v1/conversations", key: a, status: 404, want: unknownURL("POST", "/v1/conversations"), exact: true},
		{config: cfgBare, method: "GET", path: "/v1/conversations/conv_x/items", key: a, status: 404, want: unknownURL("GET", "/v1/conversations/conv_x/items"), exact: true},
		{config: cfgNoUpstream, method: "GET", path: "/v1/responses", key: a, status: 404, want: unknownURL("GET", "/v1/responses"), exact: true},
		{config: cfgNoUpstream, method: "GET", path: "/v1/responses/resp_ours/other", key: a, status: 404, want: unknownURL("GET", "/v1/responses/resp_ours/other"), exact: true},
		{config: cfgNoUpstream, method: "GET", path: "/v1/responses/", key: a, status: 404, want: unknownURL("GET", "/v1/responses/"), exact: true},
		{config: cfgNoUpstream, method: "GET", path: "/v1/responses/resp_ours", key: a, status: 200, want: `"id":"resp_ours"`},
		{config: cfgNoUpstream, method: "GET", path: "/v1/responses/resp_model", key: a, status: 404, want: "Response with id 'resp_model' not found."},

		// Methods a route does not serve: 405 with Allow, before any
		// credential check. GET routes do not serve HEAD.
		{config: cfgFull, method: "PUT", path: "/v1/containers", key: a, status: 405, want: notAllowed("PUT", "/v1/containers", "GET or POST"), exact: true, allow: "GET, POST"},
		{config: cfgFull, method: "HEAD", path: "/v1/containers", key: a, status: 405, allow: "GET, POST"},
		{config: cfgFull, method: "PATCH", path: "/v1/containers/{c}", key: a, status: 405, want: notAllowed("PATCH", "/v1/containers/{c}", "GET or DELETE"), exact: true, allow: "GET, DELETE"},
		{config: cfgFull, method: "PUT", path: "/v1/containers/{c}/files", key: a, status: 405, want: notAllowed("PUT", "/v1/containers/{c}/files", "GET or POST"), exact: true, allow: "GET, POST"},
		{config: cfgFull, method: "POST", path: "/v1/containers/{c}/files/{cf}", key: a, status: 405, want: notAllowed("POST", "/v1/containers/{c}/files/{cf}", "GET or DELETE"), exact: true, allow: "GET, DELETE"},
		{config: cfgFull, method: "DELETE", path: "/v1/containers/{c}/files/{cf}/content", key: a, status: 405, want: notAllowed("DELETE", "/v1/containers/{c}/files/{cf}/content", "GET"), exact: true, allow: "GET"},
		{config: cfgFull, method: "HEAD", path: "/v1/containers/{c}/files/{cf}/content", key: a, status: 405, allow: "GET"},
		{config: cfgFull, method: "PUT", path: "/v1/files", key: a, status: 405, want: notAllowed("PUT", "/v1/files", "GET or POST"), exact: true, allow: "GET, POST"},
		{config: cfgFull, method: "POST", path: "/v1/files/{f}", key: a, status: 405, want: notAllowed("POST", "/v1/files/{f}", "GET or DELETE"), exact: true, allow: "GET, DELETE"},
		{config: cfgFull, method: "DELETE", path: "/v1/files/{f}/content", key: a, status: 405, want: notAllowed("DELETE", "/v1/files/{f}/content", "GET"), exact: true, allow: "GET"},
		{config: cfgFull, method: "GET", path: "/v1/conversations", key: a, status: 405, want: notAllowed("GET", "/v1/conversations", "POST"), exact: true, allow: "POST"},
		{config: cfgFull, method: "PUT", path: "/v1/conversations/{conv}", key: a, status: 405, want: notAllowed("PUT", "/v1/conversations/{conv}", "GET or POST or DELETE"), exact: true, allow: "GET, POST, DELETE"},
		{config: cfgFull, method: "DELETE", path: "/v1/conversations/{conv}/items", key: a, status: 405, want: notAllowed("DELETE", "/v1/conversations/{conv}/items", "GET or POST"), exact: true, allow: "GET, POST"},
		{config: cfgFull, method: "POST", path: "/v1/conversations/{conv}/items/{item}", key: a, status: 405, want: notAllowed("POST", "/v1/conversations/{conv}/items/{item}", "GET or DELETE"), exact: true, allow: "GET, DELETE"},
		{config: cfgNoUpstream, method: "POST", path: "/v1/responses/resp_ours", key: a, status: 405, want: notAllowed("POST", "/v1/responses/resp_ours", "GET or DELETE"), exact: true, allow: "GET, DELETE"},
		{config: cfgNoUpstream, method: "DELETE", path: "/v1/responses/resp_ours/input_items", key: a, status: 405, want: notAllowed("DELETE", "/v1/responses/resp_ours/input_items", "GET"), exact: true, allow: "GET"},
		{config: cfgNoUpstream, method: "HEAD", path: "/v1/responses/resp_ours", key: a, status: 405, allow: "GET, DELETE"},

		// Encoded bytes in ids: ids are the decoded segments, so an
		// encoded slash is a slash and dot segments are ids.
		{config: cfgFull, method: "GET", path: "/v1/containers/cntr%20x", key: a, status: 404, want: "No container found with id 'cntr x'."},
		{config: cfgFull, method: "GET", path: "/v1/containers/a%2Fb", key: a, status: 404, want: unknownURL("GET", "/v1/containers/a/b"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/a%2fb", key: a, status: 404, want: unknownURL("GET", "/v1/containers/a/b"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}%2Ffiles", key: a, status: 200, want: `"id":"{cf}"`},
		{config: cfgFull, method: "GET", path: "/v1/containers%2F", key: a, status: 404, want: unknownURL("GET", "/v1/containers/"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/a%2F%2Fb", key: a, status: 404, want: unknownURL("GET", "/v1/containers/a//b"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/containers/..", key: a, status: 404, want: "No container found with id '..'."},
		{config: cfgFull, method: "GET", path: "/v1/containers/%2E%2E", key: a, status: 404, want: "No container found with id '..'."},
		{config: cfgFull, method: "GET", path: "/v1/containers/./files", key: a, status: 404, want: "No container found with id '.'."},
		{config: cfgFull, method: "GET", path: "/v1/containers/{c}/files/../content", key: a, status: 404, want: "No container file found with id '..'."},
		{config: cfgFull, method: "GET", path: "/v1/files/..", key: a, status: 404, want: "No file found with id '..'."},
		{config: cfgFull, method: "GET", path: "/v1/conversations/{conv}/items/%2e", key: a, status: 404, want: "'.'"},

		// What /v1/responses/ does not hold is the model server's: same
		// method, escaped path and query, the caller's credential, its
		// answer as it is.
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_model", key: a, status: 200, want: `"id":"resp_model"`, upstream: "/v1/responses/resp_model"},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_model/input_items", key: a, status: 404, want: "not found", upstream: "/v1/responses/resp_model/input_items"},
		{config: cfgFull, method: "DELETE", path: "/v1/responses/resp_model", key: a, status: 200, want: `"id":"resp_model"`, upstream: "/v1/responses/resp_model"},
		{config: cfgFull, method: "GET", path: "/v1/responses", key: a, status: 404, want: "not found", upstream: "/v1/responses"},
		{config: cfgFull, method: "POST", path: "/v1/responses", key: a, status: 404, want: "not found", upstream: "/v1/responses"},
		{config: cfgFull, method: "POST", path: "/v1/responses/resp_ours", status: 404, want: "not found", upstream: "/v1/responses/resp_ours"},
		{config: cfgFull, method: "PUT", path: "/v1/responses/resp_ours/input_items", key: a, status: 404, want: "not found", upstream: "/v1/responses/resp_ours/input_items"},
		{config: cfgFull, method: "HEAD", path: "/v1/responses/resp_ours", key: a, status: 404, upstream: "/v1/responses/resp_ours"},
		{config: cfgFull, method: "POST", path: "/v1/responses/resp_x/cancel", status: 404, want: "not found", upstream: "/v1/responses/resp_x/cancel"},
		{config: cfgFull, method: "GET", path: "/v1/responses/a/b/c", key: a, status: 404, want: "not found", upstream: "/v1/responses/a/b/c"},
		{config: cfgFull, method: "GET", path: "/v1/responses/a%2Fb", key: a, status: 404, want: "not found", upstream: "/v1/responses/a%2Fb"},
		{config: cfgFull, method: "GET", path: "/v1/responses/..", key: a, status: 404, want: "not found", upstream: "/v1/responses/.."},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp%20x", key: a, status: 404, want: "not found", upstream: "/v1/responses/resp%20x"},
		{config: cfgFull, method: "GET", path: "/v1/responses/", key: a, status: 404, want: unknownURL("GET", "/v1/responses/"), exact: true},
		{config: cfgFull, method: "GET", path: "/v1/responses//x", key: a, status: 404, want: unknownURL("GET", "/v1/responses//x"), exact: true},
		// Another caller's stored response is the model server's to
		// answer, unless its id is one this server issues (then it is
		// this server's 404); the list's bounds are checked first.
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_ours", key: "k-bob", status: 404, want: "not found", upstream: "/v1/responses/resp_ours"},
		{config: cfgFull, method: "GET", path: "/v1/responses/{ours}", key: a, status: 404, want: "Response with id '{ours}' not found."},
		{config: cfgFull, method: "DELETE", path: "/v1/responses/{ours}/input_items", key: a, status: 404, want: "not found", upstream: "/v1/responses/{ours}/input_items"},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_model/input_items?limit=0", key: a, status: 400, want: "limit"},
		{config: cfgFull, method: "GET", path: "/v1/responses/resp_x%2Finput_items", key: a, status: 404, want: "not found", upstream: "/v1/responses/resp_x%2Finput_items"},

		// files.source off or upstream: every /v1/files route, whatever
		// the method or credential, says where the Files API is.
		{config: cfgFilesOff, method: "GET", path: "/v1/files", key: a, status: 404, want: filesUnsupported("off"), exact: true},
		{config: cfgFilesOff, method: "PUT", path: "/v1/files", status: 404, want: filesUnsupported("off"), exact: true},
		{config: cfgFilesOff, method: "DELETE", path: "/v1/files/file-x", key: a, status: 404, want: filesUnsupported("off"), exact: true},
		{config: cfgFilesOff, method: "POST", path: "/v1/files/file-x/content", key: a, status: 404, want: filesUnsupported("off"), exact: true},
		{config: cfgFilesOff, method: "GET", path: "/v1/files/file-x/other", key: a, status: 404, want: unknownURL("GET", "/v1/files/file-x/other"), exact: true},
		{config: cfgFilesOff, method: "GET", path: "/v1/files/", key: a, status: 404, want: unknownURL("GET", "/v1/files/"), exact: true},
		{config: cfgFilesUpstream, method: "POST", path: "/v1/files", key: a, status: 404, want: filesUnsupported("upstream"), exact: true},
		{config: cfgFilesUpstream, method: "GET", path: "/v1/files/file-x/content", status: 404, want: filesUnsupported("upstream"), exact: true},
		{config: cfgFilesUpstream, method: "GET", path: "/v1/containers/{c}/files/{cf}", key: a, status: 200, want: `"id":"{cf}"`},
	}
	for _, tc := range cases {
		name := tc.config + " " + tc.method + " " + tc.path
		if tc.key == "" {
			name += " anonymous"
		}
		t.Run(name, func(t *testing.T) {
			e := newRouteEnv(t, tc.config)
			var body io.Reader
			ctype := tc.ctype
			switch {
			case ctype == "multipart":
				var buf *bytes.Buffer
				ctype, buf = multipartBody(t, map[string]string{"purpose": "user_data"}, "up.txt", []byte("up"))
				body = buf
			case tc.body != "":
				body = strings.NewReader(e.expand(tc.body))
			}
			path := e.expand(tc.path)
			status, h, got := e.do(tc.method, path, tc.key, ctype, body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, got)
			}
			want := e.expand(tc.want)
			if tc.exact && string(got) != want || !strings.Contains(string(got), want) {
				t.Errorf("answer %q, want %q", got, want)
			}
			if status >= 400 && tc.upstream == "" && tc.method != "HEAD" {
				var raw map[string]map[string]json.RawMessage
				if err := json.Unmarshal(got, &raw); err != nil || len(raw["error"]) != 4 {
					t.Errorf("not OpenAI's error shape: %s", got)
				}
				if ct := h.Get("Content-Type"); ct != "application/json" {
					t.Errorf("content-type %q", ct)
				}
			}
			if got := h.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			reqs := e.model.requests()
			switch {
			case tc.upstream == "" && len(reqs) != 0:
				t.Errorf("the model server got %s %s", reqs[0].Method, reqs[0].URL.EscapedPath())
			case tc.upstream != "" && len(reqs) != 1:
				t.Errorf("the model server got %d requests, want 1", len(reqs))
			case tc.upstream != "":
				if p := reqs[0].URL.EscapedPath(); p != e.expand(tc.upstream) || reqs[0].Method != tc.method {
					t.Errorf("the model server got %s %s, want %s %s", reqs[0].Method, p, tc.method, tc.upstream)
				}
				if tc.key != "" && reqs[0].Header.Get("Authorization") != "Bearer "+tc.key {
					t.Errorf("the model server got credential %q", reqs[0].Header.Get("Authorization"))
				}
			}
		})
	}
}
