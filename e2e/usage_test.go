package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codeinterp/codeinterp/internal/store"
)

// TestUsage: through `extproc dev`, every container a credential makes —
// a response's auto container, one made with POST /v1/containers — is one
// code interpreter session of its own, shown by
// GET /v1/organization/usage/code_interpreter_sessions in OpenAI's shape
// for that credential only; bad parameters get OpenAI's 400; the
// operator's view on the admin listener shows every owner by its hash,
// never the credential.
func TestUsage(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print(1)")}}
		}
		return reply{items: []string{m.message("done")}}
	})
	p := startProc(t, bin, []string{"CODEINTERP_CHECKPOINTS_ENABLED=false"}, "dev", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", m.URL(),
		"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	base := p.baseURL(t)
	var admin string
	for _, l := range p.all() {
		if a := logField(l, "admin"); a != "" {
			admin = a
		}
	}
	if admin == "" {
		t.Fatal("dev logged no admin address")
	}
	ctx := context.Background()
	a := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	start := time.Now().Add(-3 * time.Minute).Unix()
	for range 2 {
		if _, err := a.Responses.New(ctx, ciParams("one", false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "explicit"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(strings.Repeat("x", 1024)), "data.csv", "text/csv"),
		Purpose: openai.FilePurposeUserData}); err != nil {
		t.Fatal(err)
	}
	get := func(key, query string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/organization/usage/code_interpreter_sessions?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	type page struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string `json:"object"`
			StartTime int64  `json:"start_time"`
			EndTime   int64  `json:"end_time"`
			Results   []struct {
				Object      string  `json:"object"`
				NumSessions int64   `json:"num_sessions"`
				ProjectID   *string `json:"project_id"`
			} `json:"results"`
		} `json:"data"`
		HasMore  bool    `json:"has_more"`
		NextPage *string `json:"next_page"`
	}
	sessions := func(key, query string) (int64, page) {
		t.Helper()
		code, b := get(key, query)
		if code != http.StatusOK {
			t.Fatalf("usage %s: %d %s", query, code, b)
		}
		var p page
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, d := range p.Data {
			if d.Object != "bucket" || d.EndTime <= d.StartTime {
				t.Fatalf("bucket %+v", d)
			}
			for _, r := range d.Results {
				if r.Object != "organization.usage.code_interpreter_sessions.result" || r.ProjectID != nil {
					t.Fatalf("result %+v", r)
				}
				n += r.NumSessions
			}
		}
		return n, p
	}
	if n, p := sessions(apiKey, fmt.Sprintf("start_time=%d", start)); n != 3 || p.Object != "page" {
		t.Fatalf("1d buckets: %d sessions (%+v), want 3", n, p)
	}
	n, p1 := sessions(apiKey, fmt.Sprintf("start_time=%d&bucket_width=1m&limit=2", start))
	if !p1.HasMore || p1.NextPage == nil || len(p1.Data) != 2 {
		t.Fatalf("1m, limit 2: %+v", p1)
	}
	m2, _ := sessions(apiKey, fmt.Sprintf("start_time=%d&bucket_width=1m&page=%s", start, *p1.NextPage))
	if n+m2 != 3 {
		t.Fatalf("1m pages: %d + %d sessions, want 3", n, m2)
	}
	if n, _ := sessions("sk-someone-else", fmt.Sprintf("start_time=%d", start)); n != 0 {
		t.Fatalf("another credential sees %d sessions", n)
	}
	for _, q := range []string{"", "start_time=x", fmt.Sprintf("start_time=%d&bucket_width=2h", start), fmt.Sprintf("start_time=%d&bucket_width=1d&limit=32", start)} {
		code, b := get(apiKey, q)
		var e struct {
			Error struct{ Message, Type string } `json:"error"`
		}
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error.Type != "invalid_request_error" {
			t.Errorf("usage?%s: %d %s, want OpenAI's 400", q, code, b)
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/usage/code_interpreter_sessions?start_time=%d", admin, start))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), apiKey) {
		t.Fatal("the operator's view shows a credential")
	}
	var view struct {
		Data []struct {
			Owner            string           `json:"owner"`
			NumSessions      int64            `json:"num_sessions"`
			SessionsByMemory map[string]int64 `json:"sessions_by_memory_limit"`
			Runs             int64            `json:"runs"`
			BytesStored      *int64           `json:"bytes_stored"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &view); err != nil || len(view.Data) != 1 {
		t.Fatalf("the operator's view: %s (%v)", b, err)
	}
	own, _ := store.Owner(http.Header{"Authorization": {"Bearer " + apiKey}}, store.DefaultAuthHeaders())
	if v := view.Data[0]; v.Owner != own || v.NumSessions != 3 || v.SessionsByMemory["1g"] != 3 || v.Runs != 2 ||
		v.BytesStored == nil || *v.BytesStored < 1024 {
		t.Fatalf("the operator's view: %+v, want owner %s with 3 sessions of 1g and 2 runs", v, own)
	}
}
