package api_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

func skillMD(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nRun scripts/go.sh.\n"
}

// skillZip is a zip of files (path → content).
func skillZip(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for p, c := range files {
		w, err := zw.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, c)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// apiErr is the OpenAI error openai-go decoded.
func apiErr(t *testing.T, err error, status int, param string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != status || ae.Param != param {
		t.Fatalf("want %d naming %q, got %v", status, param, err)
	}
}

// Two replicas over one real redis-server, driven by openai-go: a skill
// one makes the other serves, with its versions and content, to the same
// credential only.
func TestSkillsAPI(t *testing.T) {
	url := redistest.Start(t)
	ck := &clock{t: time.Unix(1783564998, 0)}
	replica := func() *env {
		sk, err := redis.NewSkills(context.Background(), url, store.DefaultSkillLimits(), ck.Now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sk.Close() })
		st := memory.New(store.DefaultLimits(), ck.Now)
		t.Cleanup(func() { _ = st.Close() })
		return newEnvStore(t, st, ck, func(c *api.Config) { c.Skills = sk })
	}
	ra, rb := replica(), replica()
	a, b := ra.client("sk-a"), rb.client("sk-a")
	other := rb.client("sk-other")

	// One zip with a top folder.
	z := skillZip(t, map[string]string{"csv-report/SKILL.md": skillMD("csv-report", "Summarise a CSV."), "csv-report/scripts/go.sh": "echo hi\n"})
	k, err := a.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(z), "csv-report.zip", "application/zip")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.ID, "skill_") || k.Name != "csv-report" || k.Description != "Summarise a CSV." || k.DefaultVersion != "1" || k.LatestVersion != "1" || k.Object != "skill" || k.CreatedAt != ck.Now().Unix() {
		t.Fatalf("created: %s", k.RawJSON())
	}
	// A folder's files, each part's filename its path.
	folder, err := b.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFileArray: []io.Reader{
		openai.File(strings.NewReader(skillMD("pdf-tools", "Fill PDF forms.")), "pdf-tools/SKILL.md", "text/markdown"),
		openai.File(strings.NewReader("print(1)\n"), "pdf-tools/lib/fill.py", "text/x-python"),
	}}})
	if err != nil || folder.Name != "pdf-tools" {
		t.Fatalf("folder upload: %v %+v", err, folder)
	}

	// The other replica serves it.
	got, err := b.Skills.Get(ctx, k.ID)
	if err != nil || got.RawJSON() == "" || got.Name != "csv-report" {
		t.Fatalf("get on the other replica: %v", err)
	}
	// A second version, made the default: the skill's name and
	// description follow it.
	z2 := skillZip(t, map[string]string{"SKILL.md": skillMD("csv-report", "Summarise a CSV, with charts.")})
	v2, err := b.Skills.Versions.New(ctx, k.ID, openai.SkillVersionNewParams{Default: openai.Bool(true),
		Files: openai.SkillVersionNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(z2), "v2.zip", "application/zip")}})
	if err != nil || v2.Version != "2" || v2.SkillID != k.ID || v2.Object != "skill.version" || !strings.HasPrefix(v2.ID, "skillver_") {
		t.Fatalf("version 2: %v %+v", err, v2)
	}
	if got, _ = a.Skills.Get(ctx, k.ID); got.DefaultVersion != "2" || got.LatestVersion != "2" || got.Description != "Summarise a CSV, with charts." {
		t.Fatalf("after version 2: %s", got.RawJSON())
	}
	// The default back to 1.
	if got, err = a.Skills.Update(ctx, k.ID, openai.SkillUpdateParams{DefaultVersion: "1"}); err != nil || got.DefaultVersion != "1" || got.Description != "Summarise a CSV." {
		t.Fatalf("update: %v %+v", err, got)
	}
	_, err = a.Skills.Update(ctx, k.ID, openai.SkillUpdateParams{DefaultVersion: "7"})
	apiErr(t, err, 404, "version")

	// Versions, paged by openai-go.
	var versions []string
	for it := a.Skills.Versions.ListAutoPaging(ctx, k.ID, openai.SkillVersionListParams{Limit: openai.Int(1), Order: "asc"}); it.Next(); {
		versions = append(versions, it.Current().Version)
	}
	if strings.Join(versions, ",") != "1,2" {
		t.Fatalf("versions: %v", versions)
	}
	one, err := b.Skills.Versions.Get(ctx, k.ID, "1")
	if err != nil || one.Description != "Summarise a CSV." {
		t.Fatalf("version 1: %v %+v", err, one)
	}

	// Content: the default version's zip, and a version's.
	resp, err := b.Skills.Content.Get(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil || resp.Header.Get("Content-Type") != "application/zip" || len(zr.File) != 2 || zr.File[0].Name != "csv-report/SKILL.md" {
		t.Fatalf("content: %v %v", err, resp.Header)
	}
	resp, err = a.Skills.Versions.Content.Get(ctx, k.ID, "2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body))); err != nil || len(zr.File) != 1 {
		t.Fatalf("version 2 content: %v", err)
	}

	// Listing pages through the caller's skills only.
	var names []string
	for it := b.Skills.ListAutoPaging(ctx, openai.SkillListParams{Limit: openai.Int(1)}); it.Next(); {
		names = append(names, it.Current().Name)
	}
	if len(names) != 2 {
		t.Fatalf("list: %v", names)
	}
	if page, err := other.Skills.List(ctx, openai.SkillListParams{}); err != nil || len(page.Data) != 0 {
		t.Fatalf("another credential lists: %v %v", err, page)
	}

	// Another credential's id is a 404, whatever the endpoint.
	_, err = other.Skills.Get(ctx, k.ID)
	apiErr(t, err, 404, "skill_id")
	_, err = other.Skills.Versions.Get(ctx, k.ID, "1")
	apiErr(t, err, 404, "skill_id")
	_, err = other.Skills.Delete(ctx, k.ID)
	apiErr(t, err, 404, "skill_id")
	_, err = other.Skills.Content.Get(ctx, k.ID)
	apiErr(t, err, 404, "skill_id")

	// The default version cannot be deleted; another can.
	_, err = a.Skills.Versions.Delete(ctx, k.ID, "1")
	apiErr(t, err, 400, "version")
	del, err := a.Skills.Versions.Delete(ctx, k.ID, "2")
	if err != nil || !del.Deleted || del.Version != "2" || del.Object != "skill.version.deleted" {
		t.Fatalf("delete version: %v %+v", err, del)
	}
	if got, _ = b.Skills.Get(ctx, k.ID); got.LatestVersion != "1" {
		t.Fatalf("latest after delete: %s", got.RawJSON())
	}
	gone, err := b.Skills.Delete(ctx, k.ID)
	if err != nil || !gone.Deleted || gone.Object != "skill.deleted" || gone.ID != k.ID {
		t.Fatalf("delete: %v %+v", err, gone)
	}
	_, err = a.Skills.Get(ctx, k.ID)
	apiErr(t, err, 404, "skill_id")
}

// Bad uploads are OpenAI's 400 naming files, and store nothing.
func TestSkillsAPIRefusals(t *testing.T) {
	sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
	e := newEnv(t, func(c *api.Config) { c.Skills = sk })
	c := e.client("sk-a")
	for name, files := range map[string]openai.SkillNewParamsFilesUnion{
		"escaping": {OfFileArray: []io.Reader{
			openai.File(strings.NewReader(skillMD("a", "d")), "a/SKILL.md", "text/markdown"),
			openai.File(strings.NewReader("x"), "a/../../etc/cron.d/x", "text/plain"),
		}},
		"no SKILL.md":  {OfFile: openai.File(bytes.NewReader(skillZip(t, map[string]string{"a/run.py": "x"})), "a.zip", "application/zip")},
		"two SKILL.md": {OfFile: openai.File(bytes.NewReader(skillZip(t, map[string]string{"a/SKILL.md": skillMD("a", "d"), "a/b/skill.md": skillMD("b", "d")})), "a.zip", "application/zip")},
		"not a zip":    {OfFile: openai.File(strings.NewReader("PK\x03\x04garbage"), "a.zip", "application/zip")},
	} {
		_, err := c.Skills.New(ctx, openai.SkillNewParams{Files: files})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "files" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// No files at all, and JSON instead of multipart.
	status, _, body := e.do("POST", "/v1/skills", "sk-a", "application/json", strings.NewReader(`{}`))
	env, _ := apierror.ParseBody(body)
	if status != 400 || env.Error.Param == nil || *env.Error.Param != "files" {
		t.Fatalf("json body: %d %s", status, body)
	}
	if page, _, _ := sk.ListSkills(ctx, ownerOf("sk-a"), store.ListOptions{}); len(page) != 0 {
		t.Fatalf("a refused upload stored %v", page)
	}
	// A bad version in a path and a bad default_version.
	z := skillZip(t, map[string]string{"SKILL.md": skillMD("a", "d")})
	k, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(z), "a.zip", "application/zip")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Skills.Versions.Get(ctx, k.ID, "zero")
	apiErr(t, err, 400, "version")
	status, _, body = e.do("POST", "/v1/skills/"+k.ID, "sk-a", "application/json", strings.NewReader(`{"default_version": true}`))
	if json.Valid(body); status != 400 || !strings.Contains(string(body), "default_version") {
		t.Fatalf("bad default_version: %d %s", status, body)
	}
}

// POST /v1/containers with skills, through openai-go: a referenced skill
// (by version) and an inline one are kept in the container's record; a
// bad entry is OpenAI's error naming it and makes no container; deleting
// the container deletes its inline skill.
func TestContainerSkills(t *testing.T) {
	sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
	e := newEnv(t, func(c *api.Config) { c.Skills = sk })
	c := e.client("sk-a")
	z := skillZip(t, map[string]string{"SKILL.md": skillMD("csv-report", "Summarise a CSV.")})
	k, err := c.Skills.New(ctx, openai.SkillNewParams{Files: openai.SkillNewParamsFilesUnion{OfFile: openai.File(bytes.NewReader(z), "a.zip", "application/zip")}})
	if err != nil {
		t.Fatal(err)
	}
	inline := skillZip(t, map[string]string{"greet/SKILL.md": skillMD("greet", "Greets.")})
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "with-skills", Skills: []openai.ContainerNewParamsSkillUnion{
		{OfSkillReference: &responses.SkillReferenceParam{SkillID: k.ID, Version: openai.String("1")}},
		{OfInline: &responses.InlineSkillParam{Name: "greet", Description: "Says hello.", Source: responses.InlineSkillSourceParam{Data: base64.StdEncoding.EncodeToString(inline)}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.store.GetContainer(ctx, ownerOf("sk-a"), cn.ID)
	if err != nil || len(got.Skills) != 2 || got.Skills[0].SkillID != k.ID || got.Skills[0].Version != 1 ||
		got.Skills[1].Name != "greet" || got.Skills[1].Description != "Says hello." {
		t.Fatalf("the container's skills: %+v %v", got.Skills, err)
	}
	// The inline skill is the container's, not the Skills API's.
	if page, _ := c.Skills.List(ctx, openai.SkillListParams{}); len(page.Data) != 1 {
		t.Fatalf("skills listed: %s", page.RawJSON())
	}
	_, err = c.Skills.Get(ctx, got.Skills[1].SkillID)
	apiErr(t, err, 404, "skill_id")

	_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: "bad", Skills: []openai.ContainerNewParamsSkillUnion{
		{OfSkillReference: &responses.SkillReferenceParam{SkillID: k.ID, Version: openai.String("9")}},
	}})
	apiErr(t, err, 404, "skills[0].version")
	_, err = e.client("sk-b").Containers.New(ctx, openai.ContainerNewParams{Name: "theirs", Skills: []openai.ContainerNewParamsSkillUnion{
		{OfSkillReference: &responses.SkillReferenceParam{SkillID: k.ID}},
	}})
	apiErr(t, err, 404, "skills[0].skill_id")
	if page, _ := c.Containers.List(ctx, openai.ContainerListParams{}); len(page.Data) != 1 {
		t.Fatalf("a refused container was made: %s", page.RawJSON())
	}

	if err := c.Containers.Delete(ctx, cn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sk.GetSkill(ctx, ownerOf("sk-a"), got.Skills[1].SkillID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the inline skill outlived its container: %v", err)
	}
	if _, err := sk.GetSkill(ctx, ownerOf("sk-a"), k.ID); err != nil {
		t.Fatalf("the referenced skill went with the container: %v", err)
	}
}
