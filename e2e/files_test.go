package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// The analysis the scripted model's code does on the uploaded CSVs: it
// sums every "amount", writes result.csv and (where matplotlib exists)
// draws a chart, keeping the total in a variable for the next response.
const analysisCode = `import csv, glob
rows = []
for p in sorted(glob.glob('/mnt/data/*.csv')):
    if not p.endswith('result.csv'):
        rows += list(csv.DictReader(open(p)))
total = sum(float(r['amount']) for r in rows)
open('/mnt/data/result.csv', 'w').write('total\n%g\n' % total)
try:
    import matplotlib.pyplot as plt
    plt.figure(figsize=(4, 3))
    plt.bar(range(len(rows)), [float(r['amount']) for r in rows])
    plt.savefig('/mnt/data/chart.png')
    plt.show()
except ImportError:
    pass
print('TOTAL', total)`

// answerText links the files after non-ASCII text, so citation offsets must
// count characters, not bytes.
const answerText = "Résumé — 合計 ✓: [the totals](sandbox:/mnt/data/result.csv) and [chart](sandbox:/mnt/data/chart.png)."

func filesScript(m **model) script {
	return func(t testing.TB, c *convo) reply {
		outs := c.outputs()
		if len(outs) == 0 {
			note := ""
			for _, it := range c.items {
				if it.Get("role").Str == "developer" {
					note += it.Get("content").String()
				}
			}
			if strings.Contains(c.userText(), "uploaded") && !strings.Contains(note, ".csv") {
				t.Errorf("the model was not told the container's files: %q", note)
			}
			if strings.Contains(c.userText(), "again") {
				return reply{items: []string{(*m).call("print('AGAIN', total, open('/mnt/data/result.csv').read().split())")}}
			}
			return reply{items: []string{(*m).call(analysisCode)}}
		}
		out := lastOutputs(c)[0].Get("output").Str
		switch {
		case strings.Contains(out, "AGAIN"):
			return reply{items: []string{(*m).message("again: " + firstStdoutLine(out))}}
		case !strings.Contains(out, "TOTAL 60") || !strings.Contains(out, "sandbox:/mnt/data/result.csv"):
			t.Errorf("follow-up output lacks the total or the written file: %q", out)
		}
		return reply{items: []string{(*m).message(answerText)}}
	}
}

// TestContainersAndFiles is the upload → run → download flow with the
// official client, through the front proxy that routes the Containers and
// Files APIs as deploy/envoy does, on both providers.
func TestContainersAndFiles(t *testing.T) {
	sh := loadShapes(t)
	for _, provider := range []string{"wasm", "gvisor"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", provider, stream), func(t *testing.T) {
				var m *model
				s := newStack(t, sh, filesScript(&m), stackOptions{provider: provider, containers: true})
				m = s.model
				ctx := context.Background()

				// One file through the Files API, one uploaded into a container.
				f, err := s.client.Files.New(ctx, openai.FileNewParams{
					File: openai.File(strings.NewReader("name,amount\na,10\nb,20\n"), "sales.csv", "text/csv"), Purpose: openai.FilePurposeUserData})
				if err != nil {
					t.Fatal(err)
				}
				ctr, err := s.client.Containers.New(ctx, openai.ContainerNewParams{Name: "analysis", FileIDs: []string{f.ID}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.client.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{
					File: openai.File(strings.NewReader("name,amount\nc,30\n"), "more.csv", "text/csv")}); err != nil {
					t.Fatal(err)
				}

				p := ciParams("Sum the amounts in the uploaded files.", true)
				p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
				r, evs, err := ask(ctx, t, s, p, stream)
				if err != nil {
					t.Fatal(err)
				}
				ci := ciCalls(r)
				if len(ci) != 1 || ci[0].ContainerID != ctr.ID || ci[0].Status != responses.ResponseCodeInterpreterToolCallStatusCompleted {
					t.Fatalf("calls %+v, want one completed call in %s", ci, ctr.ID)
				}
				// The citations span exactly the links, counted in characters.
				var msg responses.ResponseOutputMessage
				for _, it := range r.Output {
					if it.Type == "message" {
						msg = it.AsMessage()
					}
				}
				text := msg.Content[0].Text
				if text != answerText {
					t.Fatalf("answer %q", text)
				}
				runes := []rune(text)
				cited := map[string]string{} // filename → file id
				zero := 0
				for _, a := range msg.Content[0].Annotations {
					cf := a.AsContainerFileCitation()
					if a.Type != "container_file_citation" || cf.ContainerID != ctr.ID {
						t.Errorf("annotation %s", a.RawJSON())
						continue
					}
					if cf.StartIndex == 0 && cf.EndIndex == 0 {
						zero++ // a displayed figure
						continue
					}
					span := string(runes[cf.StartIndex:cf.EndIndex])
					if span != "sandbox:/mnt/data/"+cf.Filename {
						t.Errorf("citation of %s spans %q", cf.Filename, span)
					}
					cited[cf.Filename] = cf.FileID
				}
				wantZero := 0
				if provider == "gvisor" {
					wantZero = 1
					if cited["chart.png"] == "" {
						t.Errorf("no citation for chart.png: %v", cited)
					}
				}
				if zero != wantZero || cited["result.csv"] == "" {
					t.Fatalf("citations %v (+%d displayed figures), want result.csv and %d figure", cited, zero, wantZero)
				}
				if stream {
					n := 0
					for _, ev := range evs {
						if ev.Type == "response.output_text.annotation.added" {
							n++
						}
					}
					if n != len(msg.Content[0].Annotations) {
						t.Errorf("%d annotation.added events for %d annotations", n, len(msg.Content[0].Annotations))
					}
				}
				// Download the result with the exact bytes.
				resp, err := s.client.Containers.Files.Content.Get(ctx, ctr.ID, cited["result.csv"])
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) != "total\n60\n" {
					t.Fatalf("downloaded %q", body)
				}
				if provider == "gvisor" {
					resp, err := s.client.Containers.Files.Content.Get(ctx, ctr.ID, cited["chart.png"])
					if err != nil {
						t.Fatal(err)
					}
					png, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if !bytes.HasPrefix(png, []byte("\x89PNG")) {
						t.Fatalf("chart.png download is not a PNG (%d bytes)", len(png))
					}
				}
				// The files are listed as container files of the right source.
				list, err := s.client.Containers.Files.List(ctx, ctr.ID, openai.ContainerFileListParams{})
				if err != nil {
					t.Fatal(err)
				}
				sources := map[string]string{}
				for _, cf := range list.Data {
					sources[cf.Path] = string(cf.Source)
				}
				if sources["/mnt/data/result.csv"] != "assistant" || sources["/mnt/data/more.csv"] != "user" || sources["/mnt/data/"+f.ID+"-sales.csv"] != "user" {
					t.Errorf("container files %v", sources)
				}

				// A second response in the same container sees the files and
				// the variables.
				p2 := ciParams("Show the total again.", true)
				p2.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
				r2, _, err := ask(ctx, t, s, p2, stream)
				if err != nil {
					t.Fatal(err)
				}
				if got := r2.OutputText(); got != "again: AGAIN 60.0 ['total', '60']" {
					t.Errorf("second response %q, want the variable and the file", got)
				}

				// Another credential does not see the container at all.
				other := openai.NewClient(option.WithBaseURL(s.proxyURL+"/v1/"), option.WithAPIKey("sk-someone-else"), option.WithMaxRetries(0))
				_, err = other.Containers.Get(ctx, ctr.ID)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
					t.Errorf("another credential: %v, want 404", err)
				}
				p3 := ciParams("Sum the amounts in the uploaded files.", false)
				p3.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
				_, err = other.Responses.New(ctx, p3)
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || gjson.Get(apiErr.RawJSON(), "code").Str != "container_not_found" {
					t.Errorf("another credential's response in the container: %v, want 404 container_not_found", err)
				}
			})
		}
	}
}

// TestAutoContainerWithFileIDs: {"type": "auto", "file_ids": [...]} makes a
// new container listed by the Containers API with the file copied in as
// /mnt/data/<file_id>-<filename>.
func TestAutoContainerWithFileIDs(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, filesScript(&m), stackOptions{containers: true})
	m = s.model
	ctx := context.Background()
	f, err := s.client.Files.New(ctx, openai.FileNewParams{
		File: openai.File(strings.NewReader("name,amount\na,25\nb,35\n"), "sales.csv", "text/csv"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	p := ciParams("Sum the amounts in the uploaded files.", true)
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(
		responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{FileIDs: []string{f.ID}})}
	r, _, err := ask(ctx, t, s, p, false)
	if err != nil {
		t.Fatal(err)
	}
	cid := ciCalls(r)[0].ContainerID
	got, err := s.client.Containers.Get(ctx, cid)
	if err != nil || got.ID != cid {
		t.Fatalf("the response's container %s is not listed: %v", cid, err)
	}
	list, err := s.client.Containers.Files.List(ctx, cid, openai.ContainerFileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, cf := range list.Data {
		paths = append(paths, cf.Path)
	}
	if !strings.Contains(strings.Join(paths, " "), "/mnt/data/"+f.ID+"-sales.csv") {
		t.Errorf("container files %v, want the Files API file copied in", paths)
	}
	// An unknown file id is OpenAI's 404.
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(
		responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{FileIDs: []string{"file-doesnotexist"}})}
	_, _, err = ask(ctx, t, s, p, false)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("unknown file id: %v, want 404", err)
	}
}

// TestAnonymousRefused: through the front proxy, a code-interpreter
// request without a credential — no header, or "Bearer " with nothing
// after it — gets OpenAI's 401 before any model or sandbox is used, as the
// Containers API does; the same request with a key is served. Before,
// every such caller shared one owner and could reach the others'
// containers.
func TestAnonymousRefused(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print(6 * 7)")}}
		}
		return reply{items: []string{m.message("42")}}
	}, stackOptions{containers: true})
	m = s.model
	body := `{"model":"gpt-5.6","input":"Compute 6*7 with Python.","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
	for _, hdr := range []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json", "Authorization": "Bearer "},
	} {
		resp, got := rawPost(t, s.proxyURL, body, hdr)
		e := gjson.GetBytes(got, "error")
		if resp.StatusCode != http.StatusUnauthorized || e.Get("type").Str != "invalid_request_error" ||
			!strings.HasPrefix(e.Get("message").Str, "You didn't provide an API key.") || e.Get("code").Type != gjson.Null || e.Get("param").Type != gjson.Null {
			t.Errorf("%v: %d %s; want OpenAI's 401", hdr, resp.StatusCode, got)
		}
	}
	for _, path := range []string{"/v1/containers", "/v1/files"} {
		resp, err := http.Get(s.proxyURL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "You didn't provide an API key.") {
			t.Errorf("GET %s without a key: %d %s", path, resp.StatusCode, b)
		}
	}
	if n := len(s.model.all()); n != 0 {
		t.Errorf("the model got %d requests from callers without a key", n)
	}
	resp, got := rawPost(t, s.proxyURL, body, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + apiKey})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "code_interpreter_call") {
		t.Errorf("with a key: %d %.500s", resp.StatusCode, got)
	}
}
