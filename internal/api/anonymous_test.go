package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
)

// noCredential are requests that carry no credential, as a careless or
// hostile caller sends them.
var noCredential = []struct {
	name   string
	header http.Header
}{
	{"no header", http.Header{}},
	{"Bearer and nothing", http.Header{"Authorization": {"Bearer "}}},
	{"Bearer alone", http.Header{"Authorization": {"Bearer"}}},
	{"blanks", http.Header{"Authorization": {"   "}}},
	{"empty api-key", http.Header{"Api-Key": {""}}},
}

// TestAnonymousRejected: with the default api.anonymous (reject), a
// request without a credential gets OpenAI's 401 on every endpoint and
// makes nothing — before, all such requests shared one owner and could
// read and delete each other's containers.
func TestAnonymousRejected(t *testing.T) {
	e := newEnv(t, nil)
	endpoints := []struct{ method, path, ctype, body string }{
		{"POST", "/v1/containers", "application/json", `{"name":"anon"}`},
		{"GET", "/v1/containers", "", ""},
		{"GET", "/v1/containers/cntr_x", "", ""},
		{"DELETE", "/v1/containers/cntr_x", "", ""},
		{"GET", "/v1/containers/cntr_x/files", "", ""},
		{"POST", "/v1/containers/cntr_x/files", "application/json", `{"file_id":"file-x"}`},
		{"GET", "/v1/containers/cntr_x/files/cfile_x/content", "", ""},
		{"GET", "/v1/files", "", ""},
		{"GET", "/v1/files/file-x", "", ""},
	}
	for _, nc := range noCredential {
		for _, ep := range endpoints {
			t.Run(nc.name+" "+ep.method+" "+ep.path, func(t *testing.T) {
				var body io.Reader
				if ep.body != "" {
					body = strings.NewReader(ep.body)
				}
				status, _, got := e.rawDo(ep.method, ep.path, nc.header, ep.ctype, body)
				checkError(t, status, got, http.StatusUnauthorized, "", "You didn't provide an API key.")
				var er apiError
				_ = json.Unmarshal(got, &er)
				if er.Error.Type != "invalid_request_error" || er.Error.Code != nil || er.Error.Message != apierror.NoCredentialMessage {
					t.Errorf("error %+v, want OpenAI's invalid_request_error without a code", er.Error)
				}
			})
		}
	}
	anon, _ := store.Owner(http.Header{}, []string{"authorization", "api-key"})
	if page, _, err := e.store.ListContainers(ctx, anon, store.ListOptions{}); err != nil || len(page) != 0 {
		t.Fatalf("the anonymous owner has containers %+v (%v): a refused request made one", page, err)
	}
	// A credential still works.
	if _, err := e.client("sk-a").Containers.New(ctx, openai.ContainerNewParams{Name: "mine"}); err != nil {
		t.Fatal(err)
	}
}

// TestAnonymousShared: api.anonymous: shared keeps a single-user laptop
// working without a key — every request without one is the same owner,
// whichever way it lacks it — and still apart from keyed callers.
func TestAnonymousShared(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.Anonymous = api.AnonymousShared })
	status, _, body := e.rawDo("POST", "/v1/containers", http.Header{}, "application/json", strings.NewReader(`{"name":"laptop"}`))
	if status != http.StatusOK {
		t.Fatalf("create without a key: %d %s", status, body)
	}
	var c struct{ ID string }
	if err := json.Unmarshal(body, &c); err != nil || c.ID == "" {
		t.Fatalf("create: %s", body)
	}
	for _, nc := range noCredential {
		if status, _, body := e.rawDo("GET", "/v1/containers/"+c.ID, nc.header, "", nil); status != http.StatusOK {
			t.Errorf("%s: GET the shared container: %d %s", nc.name, status, body)
		}
	}
	if status, _, _ := e.do("GET", "/v1/containers/"+c.ID, "sk-a", "", nil); status != http.StatusNotFound {
		t.Errorf("a keyed caller reached the anonymous container: %d", status)
	}
	if _, err := api.New(api.Config{Anonymous: "open"}, e.store, nil); err == nil {
		t.Error("api.New accepted Anonymous \"open\"")
	}
}
