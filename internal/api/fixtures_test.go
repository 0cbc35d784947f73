package api_test

import (
	"encoding/json"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// The pydantic-ai recordings of OpenAI's container file download and its
// Files API upload (VCR.py cassettes): the project's turns in their
// shapes, and the recordings themselves when CODEINTERP_FIXTURES is set.
const (
	downloadFixture = fixtures.Download
	uploadFixture   = fixtures.Upload
)

func keys(js string) []string {
	var out []string
	gjson.Parse(js).ForEach(func(k, _ gjson.Result) bool { out = append(out, k.Str); return true })
	slices.Sort(out)
	return out
}

// recorded returns the first answer among turns whose JSON has object obj.
func recorded(t *testing.T, name string, turns []fixtures.Turn, obj string) fixtures.Turn {
	t.Helper()
	for _, tr := range turns {
		if gjson.Get(tr.Response, "object").Str == obj {
			return tr
		}
	}
	t.Fatalf("%s has no answer with object %q", name, obj)
	return fixtures.Turn{}
}

// Our objects have exactly the keys OpenAI sent, and the content download
// has the recorded content-disposition for the recorded file name: in the
// recordings' shapes, and the recordings themselves when they are there.
func TestMatchesRecordings(t *testing.T) {
	uploads := fixtures.Sources(t, uploadFixture)
	for i, src := range fixtures.Sources(t, downloadFixture) {
		t.Run(src.Name, func(t *testing.T) { testMatchesRecordings(t, src.Turns, uploads[i].Turns) })
	}
}

func testMatchesRecordings(t *testing.T, download, upload []fixtures.Turn) {
	e := newEnv(t, nil)
	c := e.client("sk-a")

	recFile := recorded(t, downloadFixture, download, "container.file")
	var content fixtures.Turn
	for _, tr := range download {
		if tr.RespHeaders["content-disposition"] != "" {
			content = tr
		}
	}
	if content.RespHeaders == nil {
		t.Fatalf("%s has no content download", downloadFixture)
	}
	recPath := gjson.Get(recFile.Response, "path").Str
	name := path.Base(recPath)
	if name == "" || name == "." || !strings.HasPrefix(recPath, "/mnt/data/") {
		t.Fatalf("recorded path %q", recPath)
	}

	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "rec"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("number,square\r\n1,1\r\n"), name, "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	if cf.Path != recPath {
		t.Errorf("path %q, recorded %q", cf.Path, recPath)
	}
	status, _, body := e.do(http.MethodGet, "/v1/containers/"+cn.ID+"/files/"+cf.ID, "sk-a", "", nil)
	if status != 200 {
		t.Fatal(status, string(body))
	}
	if got, want := keys(string(body)), keys(recFile.Response); !slices.Equal(got, want) {
		t.Errorf("container.file keys %v, recorded %v", got, want)
	}
	if !gjson.GetBytes(body, "bytes").Exists() || gjson.GetBytes(body, "bytes").Type != gjson.Number {
		t.Errorf("bytes must be an integer (OpenAI sent null once): %s", body)
	}

	resp, err := c.Containers.Files.Content.Get(ctx, cn.ID, cf.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("Content-Disposition"), content.RespHeaders["content-disposition"]; got != want {
		t.Errorf("content-disposition\n got %q\nrecorded %q", got, want)
	}
	if content.Headers["accept"] != "application/binary" {
		t.Errorf("the recorded download sent accept %q; the SDK test assumes application/binary", content.Headers["accept"])
	}

	// The Files API object.
	recUpload := recorded(t, uploadFixture, upload, "file")
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("city\nParis\n"), gjson.Get(recUpload.Response, "filename").Str, "text/csv"),
		Purpose: openai.FilePurpose(gjson.Get(recUpload.Response, "purpose").Str)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(f.RawJSON()), keys(recUpload.Response); !slices.Equal(got, want) {
		t.Errorf("file keys %v, recorded %v", got, want)
	}
	if got, want := gjson.Get(f.RawJSON(), "status").Str, gjson.Get(recUpload.Response, "status").Str; got != want {
		t.Errorf("status %q, recorded %q", got, want)
	}

	// The container object against openai-go's fields (no recording holds
	// one): every field the SDK decodes that we serve is present.
	status, _, body = e.do(http.MethodGet, "/v1/containers/"+cn.ID, "sk-a", "", nil)
	if status != 200 {
		t.Fatal(status)
	}
	var got openai.ContainerGetResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]bool{
		"id": got.JSON.ID.Valid(), "object": got.JSON.Object.Valid(), "created_at": got.JSON.CreatedAt.Valid(),
		"status": got.JSON.Status.Valid(), "expires_after": got.JSON.ExpiresAfter.Valid(), "last_active_at": got.JSON.LastActiveAt.Valid(),
		"memory_limit": got.JSON.MemoryLimit.Valid(), "name": got.JSON.Name.Valid(),
	} {
		if !f {
			t.Errorf("container field %s missing or invalid: %s", name, body)
		}
	}
	if len(got.JSON.ExtraFields) != 0 {
		t.Errorf("container fields the SDK does not know: %v", got.JSON.ExtraFields)
	}
}
