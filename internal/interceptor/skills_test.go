package interceptor

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

const skillManifest = "---\nname: csv-report\ndescription: Summarise a CSV file.\n---\nCount the rows with wc -l.\n"

// TestShellSkills: a container_auto with a skill_reference (beside an auto
// code_interpreter, on the one container), through
// NewExchange with a real containers manager on gVisor: the model is told
// the skill's name, description and path in a user message, its shell
// call reads the mounted SKILL.md, and the client gets the output; another
// owner's skill id is a 404 naming the entry.
func TestShellSkills(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor")
	st := memory.New(store.DefaultLimits(), nil)
	t.Cleanup(func() { st.Close() })
	sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
	mgr := containers.New(containers.Config{Skills: sk}, st, p, nil)
	t.Cleanup(func() { mgr.Close() })
	ic, err := New(DefaultConfig(), p, nil, WithContainers(mgr))
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("csv-report/SKILL.md")
	w.Write([]byte(skillManifest))
	zw.Close()
	b, apiErr := skills.ReadZip(buf.Bytes(), "files")
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	z, _ := skills.Zip(b)
	k, _, err := sk.CreateSkill(context.Background(), store.Skill{ID: idgen.New("skill_"), Owner: "owner"},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: b.Name, Description: b.Description}, z)
	if err != nil {
		t.Fatal(err)
	}

	up := newScriptedUpstream(t,
		step{
			check: func(t *testing.T, req gjson.Result) {
				var note string
				req.Get("input").ForEach(func(_, it gjson.Result) bool {
					if it.Get("role").Str == "user" && strings.Contains(it.Get("content").String(), "Skills are available") {
						note = it.Get("content").String()
					}
					return true
				})
				if !strings.Contains(note, "- csv-report: Summarise a CSV file. (path: /tmp/skills/csv-report/SKILL.md)") {
					t.Errorf("the model's context: %q", note)
				}
				if strings.Contains(req.Get("tools").Raw, "skills") {
					t.Errorf("the skills reached the model server's tools: %s", req.Get("tools").Raw)
				}
			},
			items: []string{fcRaw("call_sh", "shell", `{"commands":["cat /tmp/skills/csv-report/SKILL.md"],"timeout_ms":null,"max_output_length":null}`)},
		},
		step{
			check: func(t *testing.T, req gjson.Result) {
				if out := outputOf(t, req, "call_sh"); !strings.Contains(out, "Count the rows with wc -l.") {
					t.Errorf("the model was told: %q", out)
				}
			},
			items: []string{msgItem("done")},
		},
	)
	body := func(id string) []byte {
		return []byte(`{"model":"m","input":"summarise","store":false,"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"shell","environment":{"type":"container_auto","skills":[` +
			`{"type":"skill_reference","skill_id":` + jsonQuote(id) + `}]}}]}`)
	}
	ctx := context.Background()
	x, err := ic.NewExchange(ctx, Caller{Owner: "owner"}, body(k.ID))
	if err != nil {
		t.Fatal(err)
	}
	st2, hdr, rb, err := up.CreateResponse(ctx, x.UpstreamBody())
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.CompleteResponse(ctx, up, st2, hdr, rb)
	if err != nil {
		t.Fatal(err)
	}
	out := gjson.GetBytes(res.Body, `output.#(type=="shell_call_output").output.0.stdout`).Str
	if out != skillManifest {
		t.Fatalf("shell_call_output: %s", res.Body)
	}

	_, err = ic.NewExchange(ctx, Caller{Owner: "someone-else"}, body(k.ID))
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Param != "tools[1].environment.skills[0].skill_id" {
		t.Fatalf("another owner's skill: %v", err)
	}
}

// TestSkillsNeedContainers: without the server's containers a
// container_auto's skills are refused, never dropped.
func TestSkillsNeedContainers(t *testing.T) {
	ic := newLoopInterceptor(t, sandboxtest.NewProvider(t, "gvisor"), nil)
	_, err := ic.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"skill_reference","skill_id":"skill_1"}]}}]}`))
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "tools[0].environment.skills" {
		t.Fatalf("skills without containers: %v", err)
	}
	// A code_interpreter's auto container has no skills in OpenAI's API.
	_, err = ic.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto","skills":[]}}]}`))
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "tools[0].container.skills" {
		t.Fatalf("code_interpreter skills: %v", err)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
