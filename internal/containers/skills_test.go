package containers_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// zipOf is a zip of files (path → content).
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for p, c := range files {
		w, _ := zw.Create(p)
		w.Write([]byte(c))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// putSkill stores a skill as the Skills API does: checked, canonical.
func putSkill(t *testing.T, st store.Skills, owner string, files map[string]string) store.Skill {
	t.Helper()
	b, e := skills.ReadZip(zipOf(t, files), "files")
	if e != nil {
		t.Fatal(e)
	}
	z, err := skills.Zip(b)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := st.CreateSkill(context.Background(), store.Skill{ID: idgen.New("skill_"), Owner: owner},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: b.Name, Description: b.Description}, z)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const reportMD = "---\nname: csv-report\ndescription: Summarise a CSV file.\n---\nRun scripts/report.sh FILE.\n"

func skillEntries(t *testing.T, entries ...any) []json.RawMessage {
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func inlineEntry(t *testing.T, files map[string]string) map[string]any {
	return map[string]any{"type": "inline", "name": "", "description": "",
		"source": map[string]any{"type": "base64", "media_type": "application/zip", "data": base64.StdEncoding.EncodeToString(zipOf(t, files))}}
}

// TestGVisorSkillsAcrossReplicas: a container_auto's skills — one
// referenced, one inline — are mounted in the gVisor sandbox at
// /tmp/skills/<name>/ where the shell reads and runs them; they are not
// the container's files; after the holder's drain the other replica,
// restoring the checkpoint, has them too (from the Redis skill store).
func TestGVisorSkillsAcrossReplicas(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	sk, err := redis.NewSkills(context.Background(), url, store.DefaultSkillLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sk.Close() })
	withSkills := func(c *containers.Config) { c.Skills = sk }
	root, key := t.TempDir(), newKey(t)
	a := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0, withSkills)
	b := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0, withSkills)

	ref := putSkill(t, sk, "o", map[string]string{"csv-report/SKILL.md": reportMD, "csv-report/scripts/report.sh": "echo rows: $(wc -l < \"$1\")\n"})
	ca := open(t, a.m, containers.Spec{Owner: "o", SkillsParam: "tools[0].environment.skills", Skills: skillEntries(t,
		map[string]any{"type": "skill_reference", "skill_id": ref.ID, "version": "latest"},
		inlineEntry(t, map[string]string{"SKILL.md": "---\nname: greet\ndescription: Greets.\n---\nSay hi.\n"}),
	)})
	got := ca.Skills()
	if len(got) != 2 || got[0].Name != "csv-report" || got[0].Description != "Summarise a CSV file." || got[1].Name != "greet" {
		t.Fatalf("the container's skills: %+v", got)
	}
	r := shell(t, ca, "cat /tmp/skills/csv-report/SKILL.md", "printf 'a\\nb\\n' > d.csv && bash /tmp/skills/csv-report/scripts/report.sh d.csv", "ls /tmp/skills")
	if r.Commands[0].Stdout != reportMD || r.Commands[1].Stdout != "rows: 2\n" || r.Commands[2].Stdout != "csv-report\ngreet\n" {
		t.Fatalf("the skills in the sandbox: %+v", r.Commands)
	}
	for _, c := range r.Changed {
		if !strings.HasPrefix(c.Path, "/mnt/data/") || strings.Contains(c.Path, "skills") {
			t.Fatalf("a skill's file became a container file: %+v", r.Changed)
		}
	}
	ca.Close()
	_ = a.m.Close() // SIGTERM: checkpointed and released

	cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	defer cb.Close()
	if len(cb.Skills()) != 2 {
		t.Fatalf("the container's skills on B: %+v", cb.Skills())
	}
	if r := shell(t, cb, "cat /tmp/skills/greet/SKILL.md | tail -1", "cat d.csv | wc -l"); r.Commands[0].Stdout != "Say hi.\n" || r.Commands[1].Stdout != "2\n" {
		t.Fatalf("on B after A's drain: %+v", r.Commands)
	}
}

// TestWasmSkills: on WASM (no shell) the mounted skills are readable by
// the code interpreter's Python; a fresh interpreter gets them again.
func TestWasmSkills(t *testing.T) {
	f := newFixture(t)
	sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
	m := containers.New(containers.Config{Now: f.clock.now, Skills: sk}, f.st, f.prov, nil)
	t.Cleanup(func() { m.Close() })
	ref := putSkill(t, sk, "o", map[string]string{"SKILL.md": reportMD})
	c := open(t, m, containers.Spec{Owner: "o", Skills: skillEntries(t, map[string]any{"type": "skill_reference", "skill_id": ref.ID})})
	if r := run(t, c, "print(open('/tmp/skills/csv-report/SKILL.md').read(), end='')"); r.Stdout != reportMD {
		t.Fatalf("read on WASM: %+v", r)
	}
	// Code that changes the folder cannot keep the change past its
	// interpreter: the next one gets the store's copy.
	run(t, c, "open('/tmp/skills/csv-report/SKILL.md', 'w').write('gone')")
	run(t, c, "import os; os._exit(0)")
	if r := run(t, c, "print(open('/tmp/skills/csv-report/SKILL.md').read(), end='')"); r.Stdout != reportMD {
		t.Fatalf("after a fresh interpreter: %+v", r)
	}
}

// TestSkillRefusals: bad skills entries fail the container's making with
// OpenAI's error naming the entry, and leave no container and no inline
// skill behind; another owner's skill does not exist.
func TestSkillRefusals(t *testing.T) {
	f := newFixture(t)
	sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
	m := containers.New(containers.Config{Now: f.clock.now, Skills: sk}, f.st, f.prov, nil)
	t.Cleanup(func() { m.Close() })
	theirs := putSkill(t, sk, "other", map[string]string{"SKILL.md": reportMD})
	good := inlineEntry(t, map[string]string{"SKILL.md": reportMD})
	for name, tc := range map[string]struct {
		entries []any
		status  int
		param   string
	}{
		"another owner's skill":  {[]any{good, map[string]any{"type": "skill_reference", "skill_id": theirs.ID}}, 404, "p[1].skill_id"},
		"another owner's, alone": {[]any{map[string]any{"type": "skill_reference", "skill_id": theirs.ID, "version": 1}}, 404, "p[0].skill_id"},
		"bad zip":                {[]any{good, inlineEntry(t, map[string]string{"a/../../x": "x", "SKILL.md": reportMD})}, 400, "p[1].source.data"},
		"two of one name":        {[]any{good, good}, 400, "p[1]"},
		"unknown type":           {[]any{map[string]any{"type": "file"}}, 400, "p[0].type"},
	} {
		_, err := m.Open(context.Background(), containers.Spec{Owner: "o", SkillsParam: "p", Skills: skillEntries(t, tc.entries...)})
		var ae *apierror.Error
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Param != tc.param {
			t.Errorf("%s: %v", name, err)
		}
	}
	if page, _, _ := f.st.ListContainers(context.Background(), "o", store.ListOptions{}); len(page) != 0 {
		t.Fatalf("refused containers were made: %+v", page)
	}
	if n := inlineCount(t, sk, "o"); n != 0 {
		t.Fatalf("%d inline skills left behind", n)
	}
}

// inlineCount counts owner's skills, listed or not, by filling the store
// to its bound: the count is the bound less what fits.
func inlineCount(t *testing.T, sk *memory.Skills, owner string) int {
	t.Helper()
	n := 0
	for {
		_, _, err := sk.CreateSkill(context.Background(), store.Skill{ID: idgen.New("skill_"), Owner: owner},
			store.SkillVersion{ID: idgen.New("skillver_"), Name: "x", Description: "x"}, nil)
		var q *store.QuotaError
		if errors.As(err, &q) {
			return store.DefaultSkillLimits().Skills - n
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
}
