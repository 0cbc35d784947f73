package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/codeinterp/codeinterp/internal/api"
)

var ctx = context.Background()

const csvData = "city,population\nParis,2148000\nLondon,8982000\n"

// Every container endpoint's happy path, decoded by openai-go.
func TestContainersSDK(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	created, err := c.Containers.New(ctx, openai.ContainerNewParams{
		Name:         "analysis",
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 30},
		MemoryLimit:  openai.ContainerNewParamsMemoryLimit4g,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now().Unix()
	if !strings.HasPrefix(created.ID, "cntr_") || len(created.ID) < 5+32 || created.Object != "container" ||
		created.Name != "analysis" || created.Status != "running" || created.CreatedAt != now || created.LastActiveAt != now ||
		created.ExpiresAfter.Anchor != "last_active_at" || created.ExpiresAfter.Minutes != 30 || created.MemoryLimit != "4g" {
		t.Fatalf("created: %s", created.RawJSON())
	}

	// Defaults: 20 minutes, 1g.
	def, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "defaults"})
	if err != nil {
		t.Fatal(err)
	}
	if def.ExpiresAfter.Minutes != 20 || def.MemoryLimit != "1g" {
		t.Fatalf("defaults: %s", def.RawJSON())
	}

	// Retrieving is a use: last_active_at moves.
	e.clock.Advance(time.Minute)
	got, err := c.Containers.Get(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != created.ID || got.LastActiveAt != now+60 || got.CreatedAt != now {
		t.Fatalf("get: %s", got.RawJSON())
	}

	page, err := c.Containers.List(ctx, openai.ContainerListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.HasMore {
		t.Fatalf("list: %s", page.RawJSON())
	}
	named, err := c.Containers.List(ctx, openai.ContainerListParams{Name: openai.String("defaults")})
	if err != nil {
		t.Fatal(err)
	}
	if len(named.Data) != 1 || named.Data[0].ID != def.ID {
		t.Fatalf("list by name: %s", named.RawJSON())
	}

	// The deleted object, as OpenAI sends it.
	status, _, body := e.do(http.MethodDelete, "/v1/containers/"+def.ID, "sk-a", "", nil)
	var del map[string]any
	_ = json.Unmarshal(body, &del)
	if status != 200 || del["id"] != def.ID || del["object"] != "container.deleted" || del["deleted"] != true {
		t.Fatalf("delete: %d %s", status, body)
	}
	if err := c.Containers.Delete(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Containers.Get(ctx, created.ID); sdkStatus(err) != 404 {
		t.Fatalf("get after delete: %v", err)
	}
}

// Container files: the multipart file, multipart file_id (openai-go) and
// JSON file_id (openai-python) uploads; retrieve, list, content, delete.
func TestContainerFilesSDK(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "files"})
	if err != nil {
		t.Fatal(err)
	}

	up, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader(csvData), "cities.csv", "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(up.ID, "cfile_") || up.Object != "container.file" || up.Path != "/mnt/data/cities.csv" ||
		up.Bytes != int64(len(csvData)) || up.ContainerID != cn.ID || up.Source != "user" || up.CreatedAt != e.clock.Now().Unix() {
		t.Fatalf("upload: %s", up.RawJSON())
	}

	// A Files API file, copied in by id (multipart field, as openai-go sends it).
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("a,b\n1,2\n"), "report.csv", "text/csv"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	byID, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{FileID: openai.String(f.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if byID.Path != "/mnt/data/"+f.ID+"-report.csv" || byID.Bytes != 8 {
		t.Fatalf("upload by file_id: %s", byID.RawJSON())
	}

	// JSON {"file_id"}, as openai-python sends it.
	e.clock.Advance(time.Second)
	f2, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain"), Purpose: "assistants"})
	if err != nil {
		t.Fatal(err)
	}
	status, _, body := e.do(http.MethodPost, "/v1/containers/"+cn.ID+"/files", "sk-a", "application/json", strings.NewReader(`{"file_id":"`+f2.ID+`"}`))
	var js map[string]any
	_ = json.Unmarshal(body, &js)
	if status != 200 || js["path"] != "/mnt/data/"+f2.ID+"-x.txt" || js["object"] != "container.file" {
		t.Fatalf("JSON upload: %d %s", status, body)
	}

	got, err := c.Containers.Files.Get(ctx, cn.ID, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != up.ID || got.Path != up.Path || got.Bytes != up.Bytes {
		t.Fatalf("get: %s", got.RawJSON())
	}
	list, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{Order: openai.ContainerFileListParamsOrderAsc})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 3 || list.HasMore || list.Data[2].Path != "/mnt/data/"+f2.ID+"-x.txt" {
		t.Fatalf("list: %s", list.RawJSON())
	}

	resp, err := c.Containers.Files.Content.Get(ctx, cn.ID, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != csvData {
		t.Fatalf("content %q", data)
	}
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "text/csv" ||
		cd != `attachment; filename="file.csv"; filename*=UTF-8''cities.csv` {
		t.Fatalf("content headers: %q %q", ct, cd)
	}

	// Uploading the same path again replaces the file and keeps its id.
	again, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("new"), "cities.csv", "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != up.ID || again.Bytes != 3 {
		t.Fatalf("replacement: %s", again.RawJSON())
	}

	status, _, body = e.do(http.MethodDelete, "/v1/containers/"+cn.ID+"/files/"+up.ID, "sk-a", "", nil)
	_ = json.Unmarshal(body, &js)
	if status != 200 || js["id"] != up.ID || js["object"] != "container.file.deleted" || js["deleted"] != true {
		t.Fatalf("delete: %d %s", status, body)
	}
	if err := c.Containers.Files.Delete(ctx, cn.ID, byID.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Containers.Files.Get(ctx, cn.ID, up.ID); sdkStatus(err) != 404 {
		t.Fatalf("get after delete: %v", err)
	}
}

// Container creation copies file_ids in as /mnt/data/<file_id>-<filename>.
func TestContainerWithFileIDs(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(csvData), "report.csv", "text/csv"), Purpose: "user_data"})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "with files", FileIDs: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 1 || list.Data[0].Path != "/mnt/data/"+f.ID+"-report.csv" || list.Data[0].Source != "user" {
		t.Fatalf("files: %s", list.RawJSON())
	}
	resp, err := c.Containers.Files.Content.Get(ctx, cn.ID, list.Data[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != csvData {
		t.Fatalf("content %q", data)
	}

	// An unknown id: 404, and no container is left behind.
	_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: "bad", FileIDs: []string{f.ID, "file-nope"}})
	if sdkStatus(err) != 404 || !strings.Contains(sdkMessage(err), "file-nope") {
		t.Fatalf("unknown file id: %v", err)
	}
	all, err := c.Containers.List(ctx, openai.ContainerListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Data) != 1 {
		t.Fatalf("a failed create left a container: %s", all.RawJSON())
	}
}

// The Files API through openai-go.
func TestFilesSDK(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.FileLifetime = 24 * time.Hour })
	c := e.client("sk-a")
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(csvData), "report.csv", "text/csv"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now().Unix()
	if !strings.HasPrefix(f.ID, "file-") || f.Object != "file" || f.Bytes != int64(len(csvData)) || f.Filename != "report.csv" ||
		f.Purpose != "user_data" || !strings.Contains(f.RawJSON(), `"status":"processed"`) || f.CreatedAt != now || f.ExpiresAt != now+86400 {
		t.Fatalf("upload: %s", f.RawJSON())
	}
	// Any purpose string is accepted; expires_after shortens the lifetime.
	e.clock.Advance(time.Second)
	g, err := c.Files.New(ctx, openai.FileNewParams{
		File: openai.File(strings.NewReader("z"), "z.bin", "application/octet-stream"), Purpose: "my-own-purpose",
		ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600},
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.Purpose != "my-own-purpose" || g.ExpiresAt != e.clock.Now().Unix()+3600 {
		t.Fatalf("second upload: %s", g.RawJSON())
	}

	got, err := c.Files.Get(ctx, f.ID)
	if err != nil || got.ID != f.ID || got.Filename != "report.csv" {
		t.Fatalf("get: %v %v", err, got)
	}
	list, err := c.Files.List(ctx, openai.FileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 2 || list.Data[0].ID != g.ID || list.HasMore {
		t.Fatalf("list: %s", list.RawJSON())
	}
	byPurpose, err := c.Files.List(ctx, openai.FileListParams{Purpose: openai.String("user_data")})
	if err != nil {
		t.Fatal(err)
	}
	if len(byPurpose.Data) != 1 || byPurpose.Data[0].ID != f.ID {
		t.Fatalf("list by purpose: %s", byPurpose.RawJSON())
	}
	resp, err := c.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != csvData {
		t.Fatalf("content %q", data)
	}
	del, err := c.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted || del.ID != f.ID || del.Object != "file" {
		t.Fatalf("delete: %v %v", err, del)
	}
	if _, err := c.Files.Get(ctx, f.ID); sdkStatus(err) != 404 {
		t.Fatalf("get after delete: %v", err)
	}
	// An expired file is gone.
	e.clock.Advance(2 * time.Hour)
	if _, err := c.Files.Get(ctx, g.ID); sdkStatus(err) != 404 {
		t.Fatalf("get after expiry: %v", err)
	}
}

// Cursor pagination: pages by limit/after, both orders, and the SDK's
// auto-pager across every page.
func TestPagination(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	var ids []string // creation order
	for i := range 7 {
		cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: fmt.Sprintf("c%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cn.ID)
		e.clock.Advance(time.Second)
	}
	desc := slices.Clone(ids)
	slices.Reverse(desc)

	var seen []string
	after := ""
	for pages := 0; ; pages++ {
		p := openai.ContainerListParams{Limit: openai.Int(3)}
		if after != "" {
			p.After = openai.String(after)
		}
		page, err := c.Containers.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		_ = json.Unmarshal([]byte(page.RawJSON()), &raw)
		for _, d := range page.Data {
			seen = append(seen, d.ID)
		}
		if raw["first_id"] != page.Data[0].ID || raw["last_id"] != page.Data[len(page.Data)-1].ID || raw["object"] != "list" {
			t.Fatalf("page %d: %s", pages, page.RawJSON())
		}
		if !page.HasMore {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}
	if !slices.Equal(seen, desc) {
		t.Fatalf("pages gave %v, want %v", seen, desc)
	}

	var auto []string
	it := c.Containers.ListAutoPaging(ctx, openai.ContainerListParams{Limit: openai.Int(2), Order: openai.ContainerListParamsOrderAsc})
	for it.Next() {
		auto = append(auto, it.Current().ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(auto, ids) {
		t.Fatalf("auto-pager gave %v, want %v", auto, ids)
	}

	// Container files and Files API files page the same way.
	cid := ids[0]
	var fids []string
	for i := range 5 {
		f, err := c.Containers.Files.New(ctx, cid, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), fmt.Sprintf("f%d.txt", i), "text/plain")})
		if err != nil {
			t.Fatal(err)
		}
		fids = append(fids, f.ID)
		e.clock.Advance(time.Second)
	}
	var gotF []string
	fit := c.Containers.Files.ListAutoPaging(ctx, cid, openai.ContainerFileListParams{Limit: openai.Int(2), Order: openai.ContainerFileListParamsOrderAsc})
	for fit.Next() {
		gotF = append(gotF, fit.Current().ID)
	}
	if err := fit.Err(); err != nil || !slices.Equal(gotF, fids) {
		t.Fatalf("container files auto-pager: %v %v, want %v", err, gotF, fids)
	}
	var apiIDs []string
	for i := range 4 {
		f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("x"), fmt.Sprintf("g%d.txt", i), "text/plain"), Purpose: "user_data"})
		if err != nil {
			t.Fatal(err)
		}
		apiIDs = append(apiIDs, f.ID)
		e.clock.Advance(time.Second)
	}
	var gotA []string
	ait := c.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(3), Order: openai.FileListParamsOrderAsc})
	for ait.Next() {
		gotA = append(gotA, ait.Current().ID)
	}
	if err := ait.Err(); err != nil || !slices.Equal(gotA, apiIDs) {
		t.Fatalf("files auto-pager: %v %v, want %v", err, gotA, apiIDs)
	}

	// An empty page: first_id and last_id are null.
	status, _, body := e.do(http.MethodGet, "/v1/containers?after="+ids[0]+"&order=asc&limit=100", "sk-other", "", nil)
	if status != 200 || !bytes.Contains(body, []byte(`"data":[]`)) || !bytes.Contains(body, []byte(`"first_id":null`)) || !bytes.Contains(body, []byte(`"has_more":false`)) {
		t.Fatalf("empty page: %d %s", status, body)
	}
}

// Another credential sees nothing of the first's: 404 everywhere, as if
// the ids did not exist, and empty lists.
func TestOtherOwner(t *testing.T) {
	e := newEnv(t, nil)
	a := e.client("sk-alice")
	cn, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "private"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := a.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("secret"), "s.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("secret"), "s.txt", "text/plain"), Purpose: "user_data"})
	if err != nil {
		t.Fatal(err)
	}
	ct, mp := multipartBody(t, nil, "x.txt", []byte("x"))
	cases := []struct {
		method, path, ctype string
		body                io.Reader
		param               string
	}{
		{"GET", "/v1/containers/" + cn.ID, "", nil, "container_id"},
		{"DELETE", "/v1/containers/" + cn.ID, "", nil, "container_id"},
		{"GET", "/v1/containers/" + cn.ID + "/files", "", nil, "container_id"},
		{"POST", "/v1/containers/" + cn.ID + "/files", ct, mp, "container_id"},
		{"POST", "/v1/containers/" + cn.ID + "/files", "application/json", strings.NewReader(`{"file_id":"` + f.ID + `"}`), "container_id"},
		{"GET", "/v1/containers/" + cn.ID + "/files/" + cf.ID, "", nil, "container_id"},
		{"GET", "/v1/containers/" + cn.ID + "/files/" + cf.ID + "/content", "", nil, "container_id"},
		{"DELETE", "/v1/containers/" + cn.ID + "/files/" + cf.ID, "", nil, "container_id"},
		{"GET", "/v1/files/" + f.ID, "", nil, "file_id"},
		{"GET", "/v1/files/" + f.ID + "/content", "", nil, "file_id"},
		{"DELETE", "/v1/files/" + f.ID, "", nil, "file_id"},
		{"POST", "/v1/containers", "application/json", strings.NewReader(`{"name":"mine","file_ids":["` + f.ID + `"]}`), "file_ids"},
	}
	for _, key := range []string{"sk-bob"} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%q %s %s", key, tc.method, tc.path), func(t *testing.T) {
				status, _, body := e.do(tc.method, tc.path, key, tc.ctype, tc.body)
				checkError(t, status, body, 404, tc.param, "No ")
				var er apiError
				_ = json.Unmarshal(body, &er)
				if er.Error.Type != "invalid_request_error" {
					t.Errorf("type %q", er.Error.Type)
				}
			})
		}
		// The bodies were consumed; rebuild them for the next credential.
		ct, mp = multipartBody(t, nil, "x.txt", []byte("x"))
		cases[3].ctype, cases[3].body = ct, mp
		cases[4].body = strings.NewReader(`{"file_id":"` + f.ID + `"}`)
		cases[11].body = strings.NewReader(`{"name":"mine","file_ids":["` + f.ID + `"]}`)
	}
	b := e.client("sk-bob")
	if l, err := b.Containers.List(ctx, openai.ContainerListParams{}); err != nil || len(l.Data) != 0 {
		t.Fatalf("bob's containers: %v %v", err, l)
	}
	if l, err := b.Files.List(ctx, openai.FileListParams{}); err != nil || len(l.Data) != 0 {
		t.Fatalf("bob's files: %v %v", err, l)
	}
	// Alice still has everything (bob's DELETEs did nothing).
	if _, err := a.Containers.Files.Get(ctx, cn.ID, cf.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Files.Get(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	// The api-key header is a credential too (Azure style).
	req, _ := http.NewRequest("GET", e.url+"/v1/containers/"+cn.ID, nil)
	req.Header.Set("api-key", "sk-alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("api-key credential reached the bearer's container: %d", resp.StatusCode)
	}
}

// An expired container (injected clock): using it is 400 "Container is
// expired.", retrieving shows status "expired", listing leaves it out.
func TestExpiry(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "short", ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	// Use keeps it alive: 3 uses 90s apart outlive the 2 minutes.
	for range 3 {
		e.clock.Advance(90 * time.Second)
		if _, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{}); err != nil {
			t.Fatalf("a container in use expired: %v", err)
		}
	}
	e.clock.Advance(2 * time.Minute)
	ct, mp := multipartBody(t, nil, "y.txt", []byte("y"))
	for _, tc := range []struct {
		method, path, ctype string
		body                io.Reader
	}{
		{"GET", "/v1/containers/" + cn.ID + "/files", "", nil},
		{"POST", "/v1/containers/" + cn.ID + "/files", ct, mp},
		{"GET", "/v1/containers/" + cn.ID + "/files/" + f.ID, "", nil},
		{"GET", "/v1/containers/" + cn.ID + "/files/" + f.ID + "/content", "", nil},
		{"DELETE", "/v1/containers/" + cn.ID + "/files/" + f.ID, "", nil},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			status, _, body := e.do(tc.method, tc.path, "sk-a", tc.ctype, tc.body)
			checkError(t, status, body, 400, "container_id", "Container is expired.")
		})
	}
	got, err := c.Containers.Get(ctx, cn.ID)
	if err != nil || got.Status != "expired" {
		t.Fatalf("get expired: %v %+v", err, got)
	}
	if l, err := c.Containers.List(ctx, openai.ContainerListParams{}); err != nil || len(l.Data) != 0 {
		t.Fatalf("list shows an expired container: %v %v", err, l)
	}
	if err := c.Containers.Delete(ctx, cn.ID); err != nil {
		t.Fatalf("deleting an expired container: %v", err)
	}
}

// Uploads above max_upload_bytes are 413 and store nothing.
func TestTooLarge(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.MaxUploadBytes = 1000 })
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "small"})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 1001)
	_, err = c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(big), "big.bin", "application/octet-stream")})
	if sdkStatus(err) != 413 {
		t.Fatalf("container upload: %v", err)
	}
	// A body far beyond the bound is cut while it is read.
	ct, mp := multipartBody(t, map[string]string{"purpose": "user_data"}, "huge.bin", bytes.Repeat([]byte("y"), 1<<20))
	status, _, body := e.do("POST", "/v1/files", "sk-a", ct, mp)
	checkError(t, status, body, 413, "file", "1000 bytes")
	// Exactly at the bound is fine.
	if _, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(bytes.NewReader(big[:1000]), "ok.bin", "application/octet-stream")}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
	if err != nil || len(l.Data) != 1 || l.Data[0].Path != "/mnt/data/ok.bin" {
		t.Fatalf("after failed uploads: %v %s", err, l.RawJSON())
	}
	if fl, err := c.Files.List(ctx, openai.FileListParams{}); err != nil || len(fl.Data) != 0 {
		t.Fatalf("a refused upload was stored: %v %v", err, fl)
	}
	// A JSON body over its bound.
	status, _, body = e.do("POST", "/v1/containers", "sk-a", "application/json", strings.NewReader(`{"name":"`+strings.Repeat("n", 2<<20)+`"}`))
	checkError(t, status, body, 413, "", "exceeds")
}

// Malformed requests: 400 with param (405 and 404 for the wrong method or
// path), and nothing stored.
func TestMalformed(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.MaxMemoryLimit = 4 << 30 })
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	files := "/v1/containers/" + cn.ID + "/files"
	noFileCT, noFile := multipartBody(t, map[string]string{"purpose": "user_data"}, "", nil)
	unknownCT, unknown := multipartBody(t, map[string]string{"colour": "blue"}, "a.txt", []byte("a"))
	noPurposeCT, noPurpose := multipartBody(t, nil, "a.txt", []byte("a"))
	bothCT, both := multipartBody(t, map[string]string{"file_id": "file-x"}, "a.txt", []byte("a"))
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		param, msg                      string
	}{
		{"bad JSON", "POST", "/v1/containers", "application/json", `{"name":`, 400, "", "could not parse the JSON"},
		{"JSON not an object", "POST", "/v1/containers", "application/json", `["a"]`, 400, "", "JSON object"},
		{"missing name", "POST", "/v1/containers", "application/json", `{}`, 400, "name", "Missing required parameter: 'name'"},
		{"name not a string", "POST", "/v1/containers", "application/json", `{"name":5}`, 400, "name", "expected a string"},
		{"unknown parameter", "POST", "/v1/containers", "application/json", `{"name":"a","colour":"blue"}`, 400, "colour", "Unknown parameter"},
		{"memory above the maximum", "POST", "/v1/containers", "application/json", `{"name":"a","memory_limit":"16g"}`, 400, "memory_limit", "not one of 1g, 4g"},
		{"memory not OpenAI's", "POST", "/v1/containers", "application/json", `{"name":"a","memory_limit":"2g"}`, 400, "memory_limit", "not one of"},
		{"expiry too long", "POST", "/v1/containers", "application/json", `{"name":"a","expires_after":{"anchor":"last_active_at","minutes":61}}`, 400, "expires_after.minutes", "between 1 and 60"},
		{"expiry anchor", "POST", "/v1/containers", "application/json", `{"name":"a","expires_after":{"anchor":"created_at","minutes":5}}`, 400, "expires_after.anchor", "last_active_at"},
		{"expiry minutes missing", "POST", "/v1/containers", "application/json", `{"name":"a","expires_after":{"anchor":"last_active_at"}}`, 400, "expires_after.minutes", "Missing"},
		{"network", "POST", "/v1/containers", "application/json", `{"name":"a","network_policy":{"type":"allowlist","allowed_domains":["x.com"]}}`, 400, "network_policy", "no network"},
		{"file_ids not an array", "POST", "/v1/containers", "application/json", `{"name":"a","file_ids":"file-x"}`, 400, "file_ids", "expected an array"},
		{"bad limit", "GET", "/v1/containers?limit=0", "", "", 400, "limit", "between 1 and 100"},
		{"limit not a number", "GET", files + "?limit=ten", "", "", 400, "limit", "between 1 and 100"},
		{"bad order", "GET", "/v1/containers?order=up", "", "", 400, "order", "'asc' or 'desc'"},
		{"files limit", "GET", "/v1/files?limit=10001", "", "", 400, "limit", "between 1 and 10000"},
		{"broken multipart", "POST", files, "multipart/form-data; boundary=xyz", "--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nabc", 400, "file", "malformed"},
		{"multipart without boundary", "POST", files, "multipart/form-data", "abc", 400, "file", "could not be parsed"},
		{"multipart without file", "POST", files, noFileCT, noFile.String(), 400, "purpose", "Unknown parameter"},
		{"unknown multipart field", "POST", files, unknownCT, unknown.String(), 400, "colour", "Unknown parameter"},
		{"file and file_id", "POST", files, bothCT, both.String(), 400, "file_id", "either"},
		{"wrong content type", "POST", files, "text/plain", "abc", 400, "file", "Unsupported Content-Type"},
		{"JSON without file_id", "POST", files, "application/json", `{}`, 400, "file_id", "Missing required parameter: 'file_id'"},
		{"JSON unknown key", "POST", files, "application/json", `{"file":"x"}`, 400, "file", "Unknown parameter"},
		{"JSON file_id unknown", "POST", files, "application/json", `{"file_id":"file-nope"}`, 404, "file_id", "No file found"},
		{"files without purpose", "POST", "/v1/files", noPurposeCT, noPurpose.String(), 400, "purpose", "Missing required parameter: 'purpose'"},
		{"files without file", "POST", "/v1/files", noFileCT, noFile.String(), 400, "file", "Missing required parameter: 'file'"},
		{"files as JSON", "POST", "/v1/files", "application/json", `{}`, 400, "file", "multipart/form-data"},
		{"unknown container", "GET", "/v1/containers/cntr_nope", "", "", 404, "container_id", "No container found with id 'cntr_nope'"},
		{"odd container id", "GET", "/v1/containers/cntr%20x", "", "", 404, "container_id", "No container found"},
		{"unknown container file", "GET", files + "/cfile_nope", "", "", 404, "file_id", "No container file found"},
		{"unknown file", "GET", "/v1/files/file-nope/content", "", "", 404, "file_id", "No file found"},
		{"wrong method", "PUT", "/v1/containers", "", "", 405, "", "not allowed"},
		{"wrong method on content", "DELETE", files + "/cfile_x/content", "", "", 405, "", "use GET"},
		{"unknown path", "GET", "/v1/containers/" + cn.ID + "/things", "", "", 404, "", "Invalid URL"},
		{"trailing slash", "GET", "/v1/containers/", "", "", 404, "", "Invalid URL"},
		{"not v1", "GET", "/containers", "", "", 404, "", "Invalid URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			status, h, got := e.do(tc.method, tc.path, "sk-a", tc.ctype, body)
			checkError(t, status, got, tc.status, tc.param, tc.msg)
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if tc.status == 405 && h.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	// Nothing was created by any of them.
	if l, err := c.Containers.List(ctx, openai.ContainerListParams{}); err != nil || len(l.Data) != 1 {
		t.Fatalf("containers after malformed requests: %v %v", err, l)
	}
	if l, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{}); err != nil || len(l.Data) != 0 {
		t.Fatalf("files after malformed requests: %v %v", err, l)
	}
}

// files.source off: no Files API, file ids refused; upstream: /v1/files
// is not served here and ids are fetched from the upstream with the
// caller's credential.
func TestFilesSources(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		e := newEnv(t, func(c *api.Config) { c.FilesSource = api.FilesOff })
		for _, p := range []string{"/v1/files", "/v1/files/file-x", "/v1/files/file-x/content"} {
			status, _, body := e.do("GET", p, "sk-a", "", nil)
			checkError(t, status, body, 404, "", "not supported")
		}
		status, _, body := e.do("POST", "/v1/containers", "sk-a", "application/json", strings.NewReader(`{"name":"a","file_ids":["file-x"]}`))
		checkError(t, status, body, 400, "file_ids", "files.source: off")
		// Containers still work.
		if _, err := e.client("sk-a").Containers.New(ctx, openai.ContainerNewParams{Name: "a"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("upstream", func(t *testing.T) {
		var auth []string
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			auth = append(auth, r.Header.Get("Authorization"))
			switch r.URL.Path {
			case "/v1/files/file-up":
				_, _ = io.WriteString(w, `{"id":"file-up","object":"file","filename":"up.csv","bytes":7,"purpose":"user_data"}`)
			case "/v1/files/file-up/content":
				_, _ = io.WriteString(w, "a,b\n1,2")
			case "/v1/files/file-big":
				_, _ = io.WriteString(w, `{"id":"file-big","object":"file","filename":"big.bin"}`)
			case "/v1/files/file-big/content":
				_, _ = w.Write(bytes.Repeat([]byte("z"), 2000))
			case "/v1/files/file-denied":
				w.WriteHeader(http.StatusForbidden)
			default:
				http.NotFound(w, r)
			}
		}))
		defer up.Close()
		e := newEnv(t, func(c *api.Config) {
			c.FilesSource, c.FilesUpstreamURL, c.MaxUploadBytes = api.FilesUpstream, up.URL+"/v1", 1000
		})
		c := e.client("sk-up")
		cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "u", FileIDs: []string{"file-up"}})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
		if err != nil || len(l.Data) != 1 || l.Data[0].Path != "/mnt/data/file-up-up.csv" || l.Data[0].Bytes != 7 {
			t.Fatalf("files: %v %s", err, l.RawJSON())
		}
		if !slices.Equal(auth, []string{"Bearer sk-up", "Bearer sk-up"}) {
			t.Fatalf("upstream saw credentials %v", auth)
		}
		for _, tc := range []struct {
			id     string
			status int
		}{{"file-nope", 404}, {"file-big", 413}, {"file-denied", 502}} {
			_, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{FileID: openai.String(tc.id)})
			if sdkStatus(err) != tc.status {
				t.Errorf("%s: %v, want %d", tc.id, err, tc.status)
			}
		}
		status, _, body := e.do("GET", "/v1/files", "sk-up", "", nil)
		checkError(t, status, body, 404, "", "served by the upstream")
	})
}

// Quotas of the store are 4xx naming the bound.
func TestQuota(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	var last error
	for i := range 70 {
		_, last = c.Containers.New(ctx, openai.ContainerNewParams{Name: fmt.Sprint(i)})
		if last != nil {
			break
		}
	}
	if sdkStatus(last) != 400 || !strings.Contains(sdkMessage(last), "owner_containers") {
		t.Fatalf("over the container bound: %v", last)
	}
}

func TestNewConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  api.Config
	}{
		{"bad source", api.Config{FilesSource: "s3"}},
		{"upstream without URL", api.Config{FilesSource: api.FilesUpstream}},
		{"default above max", api.Config{DefaultExpiryMinutes: 30, MaxExpiryMinutes: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := api.New(tc.cfg, newEnv(t, nil).store, nil); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := api.New(api.Config{}, nil, nil); err == nil {
		t.Fatal("accepted a nil store")
	}
}
