package interceptor

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/tidwall/gjson"
)

// TestCitations: a citation spans exactly the sandbox: URL, counted in
// characters (code points), as OpenAI's start_index/end_index are — also
// after non-ASCII text; links to files the container lacks get none.
func TestCitations(t *testing.T) {
	files := map[string]containers.File{
		"/mnt/data/numbers_and_squares.csv": {ID: "cfile_1", Path: "/mnt/data/numbers_and_squares.csv", Filename: "numbers_and_squares.csv"},
		"/mnt/data/chart é.png":             {ID: "cfile_2", Path: "/mnt/data/chart é.png", Filename: "chart é.png"},
		"/mnt/data/plot.png":                {ID: "cfile_3", Path: "/mnt/data/plot.png", Filename: "plot.png"},
	}
	cases := []struct {
		name string
		text string
		want []string // the cited URLs, in order
	}{
		// OpenAI's recorded answer: citation 30–71.
		{"recorded", "Done: [Download the CSV file](sandbox:/mnt/data/numbers_and_squares.csv)", []string{"sandbox:/mnt/data/numbers_and_squares.csv"}},
		{"non-ASCII before", "Voilà — ünïcödé 数据 🎉: [csv](sandbox:/mnt/data/numbers_and_squares.csv) and [plot](sandbox:/mnt/data/plot.png).",
			[]string{"sandbox:/mnt/data/numbers_and_squares.csv", "sandbox:/mnt/data/plot.png"}},
		{"bare link at the end", "see sandbox:/mnt/data/plot.png", []string{"sandbox:/mnt/data/plot.png"}},
		{"unknown file", "[x](sandbox:/mnt/data/missing.txt) [p](sandbox:/mnt/data/plot.png)", []string{"sandbox:/mnt/data/plot.png"}},
		{"no links", "nothing to see", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := citations("cntr_x", c.text, files)
			if len(got) != len(c.want) {
				t.Fatalf("%d citations %v, want %d", len(got), got, len(c.want))
			}
			runes := []rune(c.text)
			for k, a := range got {
				j := gjson.Parse(a)
				s, e := int(j.Get("start_index").Int()), int(j.Get("end_index").Int())
				if s < 0 || e > len(runes) || string(runes[s:e]) != c.want[k] {
					t.Errorf("citation %d spans %d–%d = %q, want %q", k, s, e, string(runes[max(s, 0):min(e, len(runes))]), c.want[k])
				}
				f := files[strings.TrimPrefix(c.want[k], "sandbox:")]
				if j.Get("type").Str != "container_file_citation" || j.Get("file_id").Str != f.ID ||
					j.Get("filename").Str != f.Filename || j.Get("container_id").Str != "cntr_x" {
					t.Errorf("citation %s", a)
				}
			}
			if c.name == "recorded" {
				j := gjson.Parse(got[0])
				if j.Get("start_index").Int() != 30 || j.Get("end_index").Int() != 71 {
					t.Errorf("recorded span %d–%d, OpenAI's is 30–71", j.Get("start_index").Int(), j.Get("end_index").Int())
				}
			}
		})
	}
	// OpenAI's field order: type, then alphabetical.
	keys := []string{}
	gjson.Parse(citation("c", files["/mnt/data/plot.png"], 0, 0)).ForEach(func(k, _ gjson.Result) bool {
		keys = append(keys, k.Str)
		return true
	})
	if strings.Join(keys, ",") != "type,container_id,end_index,file_id,filename,start_index" {
		t.Errorf("citation fields %v", keys)
	}
}

func TestInputFiles(t *testing.T) {
	csv := []byte("a,b\n1,2\n")
	b64 := base64.StdEncoding.EncodeToString(csv)
	cases := []struct {
		name      string
		input     string
		note      bool
		wantFiles int
		wantErr   string // param of the 400
		wantInput string // substring of the new input when note
	}{
		{name: "data URL", input: `[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_file","filename":"d.csv","file_data":"data:text/csv;base64,` + b64 + `"}]}]`, wantFiles: 1},
		{name: "bare base64", input: `[{"role":"user","content":[{"type":"input_file","filename":"d.csv","file_data":"` + b64 + `"}]}]`, wantFiles: 1},
		{name: "file id", input: `[{"role":"user","content":[{"type":"input_file","file_id":"file-abc"}]}]`, wantFiles: 1},
		{name: "file url passes", input: `[{"role":"user","content":[{"type":"input_file","file_url":"https://example.com/x.pdf"}]}]`, wantFiles: 0},
		{name: "note", note: true, input: `[{"role":"user","content":[{"type":"input_file","filename":"d.csv","file_data":"` + b64 + `"}]}]`, wantFiles: 1, wantInput: "/mnt/data/d.csv"},
		{name: "no filename", input: `[{"role":"user","content":[{"type":"input_file","file_data":"` + b64 + `"}]}]`, wantErr: "input[0].content[0].filename"},
		{name: "bad base64", input: `[{"role":"user","content":[{"type":"input_file","filename":"x","file_data":"@@@"}]}]`, wantErr: "input[0].content[0].file_data"},
		{name: "neither", input: `[{"role":"user","content":[{"type":"input_file","filename":"x"}]}]`, wantErr: "input[0].content[0]"},
		// Names a container cannot hold, or that reshape the text the
		// model reads, are refused as uploads are.
		{name: "bidi override", input: `[{"role":"user","content":[{"type":"input_file","filename":"invoice\u202etxt.exe","file_data":"` + b64 + `"}]}]`, wantErr: "input[0].content[0].filename"},
		{name: "next line", input: `[{"role":"user","content":[{"type":"input_file","filename":"a\u0085b.csv","file_data":"` + b64 + `"}]}]`, wantErr: "input[0].content[0].filename"},
		{name: "line separator", input: `[{"role":"user","content":[{"type":"input_file","filename":"a\u2028b.csv","file_data":"` + b64 + `"}]}]`, wantErr: "input[0].content[0].filename"},
		{name: "too long", input: `[{"role":"user","content":[{"type":"input_file","filename":"` + strings.Repeat("n", 256) + `","file_data":"` + b64 + `"}]}]`, wantErr: "input[0].content[0].filename"},
		{name: "a path is its base name", note: true, input: `[{"role":"user","content":[{"type":"input_file","filename":"C:\\data\\d.csv","file_data":"` + b64 + `"}]}]`, wantFiles: 1, wantInput: "as /mnt/data/d.csv"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files, in, changed, err := inputFiles(gjson.Parse(c.input), c.note)
			if c.wantErr != "" {
				if err == nil || err.Param != c.wantErr || err.Status != 400 {
					t.Fatalf("err %v, want a 400 with param %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != c.wantFiles {
				t.Fatalf("%d files, want %d", len(files), c.wantFiles)
			}
			if c.wantFiles == 1 && files[0].FileID == "" && string(files[0].Data) != string(csv) {
				t.Errorf("data %q", files[0].Data)
			}
			if changed != c.note || (c.note && (!strings.Contains(in, c.wantInput) || strings.Contains(in, "input_file"))) {
				t.Errorf("changed %v, input %s", changed, in)
			}
			if !c.note && in != c.input {
				t.Errorf("input changed without note: %s", in)
			}
		})
	}
}

func TestReplayedContainers(t *testing.T) {
	in := gjson.Parse(`[{"type":"code_interpreter_call","container_id":"cntr_a"},{"type":"message"},{"type":"code_interpreter_call","container_id":"cntr_b"},{"type":"code_interpreter_call","container_id":"cntr_a"},` +
		`{"type":"shell_call","environment":{"type":"local"}},{"type":"shell_call","environment":{"type":"container_reference","container_id":"cntr_c"}}]`)
	ic := newRewriter(t, nil)
	if got := strings.Join(ic.replayedContainers(in), ","); got != "cntr_c,cntr_b,cntr_a" {
		t.Errorf("replayed containers %s, want newest first without repeats", got)
	}
}

// TestQuotePath: a path reaches the model as it is unless a character in it
// does not show as itself; then it is quoted with that character escaped.
func TestQuotePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/mnt/data/result.csv", "/mnt/data/result.csv"},
		{"/mnt/data/données 合計 📈.csv", "/mnt/data/données 合計 📈.csv"},
		{"/mnt/data/invoice\u202etxt.exe", `"/mnt/data/invoice\u202etxt.exe"`},
		{"/mnt/data/a\u0085b", `"/mnt/data/a\u0085b"`},
		{"/mnt/data/a\u2028b", `"/mnt/data/a\u2028b"`},
		{"/mnt/data/a\nb", `"/mnt/data/a\nb"`},
		{"/mnt/data/zero\u200bwidth", `"/mnt/data/zero\u200bwidth"`},
	} {
		if got := containerapi.QuotePath(tc.in); got != tc.want {
			t.Errorf("containerapi.QuotePath(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	note := filesNote("cntr_x", []containers.File{{Path: "/mnt/data/a\u2028b.txt", Bytes: 1}})
	if strings.ContainsRune(note, '\u2028') || !strings.Contains(note, `"/mnt/data/a\u2028b.txt"`) {
		t.Errorf("the files note carries the separator: %q", note)
	}
}
