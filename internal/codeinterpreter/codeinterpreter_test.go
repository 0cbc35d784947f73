package codeinterpreter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

func quoted(s string) gjson.Result {
	b, _ := json.Marshal(s)
	return gjson.ParseBytes(b)
}

// TestDecode: a call's arguments → the cell, or why not (the raw
// arguments kept as what the client is shown).
func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     gjson.Result
		code     string
		argErr   string
		textWant string
	}{
		{"code", quoted(`{"code":"print(1)"}`), "print(1)", "", "print(1)"},
		{"extra fields ignored", quoted(`{"code":"x = 1\nx","why":"test"}`), "x = 1\nx", "", "x = 1\nx"},
		{"missing arguments", gjson.Result{}, "", "the arguments are missing", ""},
		{"an object, not a string", gjson.Parse(`{"code":"1"}`), "", "the arguments are missing", ""},
		{"not JSON", quoted(`print(1)`), "print(1)", "the arguments are not a JSON object", "print(1)"},
		{"a JSON string", quoted(`"print(1)"`), `"print(1)"`, "the arguments are not a JSON object", `"print(1)"`},
		{"code a number", quoted(`{"code":1}`), `{"code":1}`, `the arguments have no string field "code"`, `{"code":1}`},
		{"no code", quoted(`{"source":"1"}`), `{"source":"1"}`, `the arguments have no string field "code"`, `{"source":"1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, argErr := ArgsCode(tc.args)
			if code != tc.code || argErr != tc.argErr {
				t.Errorf("ArgsCode = %q, %q; want %q, %q", code, argErr, tc.code, tc.argErr)
			}
			a := Tool{Fn: "python"}.Decode(tc.args)
			if a.Invalid() != tc.argErr || a.Text() != tc.textWant {
				t.Errorf("Decode: invalid %q text %q", a.Invalid(), a.Text())
			}
		})
	}
}

// TestFunction: the strict function under the operator's name, its
// description following what the provider reports.
func TestFunction(t *testing.T) {
	pol := &egress.Policy{AllowedDomains: []string{"pypi.org"}}
	for _, tc := range []struct {
		name     string
		env      sandbox.Environment
		pol      *egress.Policy
		version  string
		contains []string
		lacks    []string
	}{
		{"stdlib only, no network", sandbox.Environment{PythonVersion: "3.13"}, nil, "3.13",
			[]string{"Only the Python standard library is available", "there is no network access"}, []string{"Network access:"}},
		{"packages and images", sandbox.Environment{PythonVersion: "3.11", Packages: []string{"numpy", "pandas"}, Images: true}, nil, "3.11",
			[]string{"numpy, pandas", "Nothing else can be installed", "Matplotlib figures"}, []string{"Network access:"}},
		{"network", sandbox.Environment{Packages: []string{"numpy"}}, pol, "3",
			[]string{"numpy", "Network access:", "pypi.org"}, []string{"Nothing else can be installed"}},
		{"network, stdlib", sandbox.Environment{}, pol, "3",
			[]string{"until you install more", "pypi.org"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := gjson.Parse(Tool{Fn: "python"}.Function(tc.env, tc.pol))
			if fn.Get("type").Str != "function" || fn.Get("name").Str != "python" || !fn.Get("strict").Bool() ||
				fn.Get("parameters.required").Raw != `["code"]` || fn.Get("parameters.additionalProperties").Type != gjson.False ||
				fn.Get("parameters.properties.code.description").Str != "The Python "+tc.version+" source code to run." {
				t.Errorf("function %s", fn.Raw)
			}
			d := fn.Get("description").Str
			for _, s := range tc.contains {
				if !strings.Contains(d, s) {
					t.Errorf("description lacks %q: %s", s, d)
				}
			}
			for _, s := range tc.lacks {
				if strings.Contains(d, s) {
					t.Errorf("description has %q: %s", s, d)
				}
			}
		})
	}
}

// png is the smallest PNG header http.DetectContentType recognises.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

// TestReport: the model's text and the item's status, per fate.
func TestReport(t *testing.T) {
	ran := func(r sandbox.Result) hostedtool.Outcome {
		return hostedtool.Outcome{RunResult: containerapi.RunResult{Result: r}}
	}
	for _, tc := range []struct {
		name   string
		argErr string
		o      hostedtool.Outcome
		want   string
		status string
	}{
		{"completed", "", ran(sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "42"}),
			"status: completed\nstdout:\n42\nstderr: (empty)\n", "completed"},
		{"exception", "", ran(sandbox.Result{Outcome: sandbox.OutcomeError, Stderr: "ZeroDivisionError\n"}),
			"status: failed: a Python exception was raised (traceback in stderr)\nstdout: (empty)\nstderr:\nZeroDivisionError\n", "failed"},
		{"timeout with detail", "", ran(sandbox.Result{Outcome: sandbox.OutcomeTimeout, Detail: "after 30 s\nmore"}),
			"status: incomplete: the run hit the time limit and was stopped; variables from earlier calls are lost (after 30 s)\nstdout: (empty)\nstderr: (empty)\n", "incomplete"},
		{"truncated", "", ran(sandbox.Result{Outcome: sandbox.OutcomeOutputTruncated, Stdout: "xx", StdoutTruncated: true}),
			"status: incomplete: the code ran to its end, but its output was cut at the size limit\nstdout:\nxx\n[stdout truncated]\nstderr: (empty)\n", "incomplete"},
		{"crashed", "", ran(sandbox.Result{Outcome: sandbox.OutcomeCrashed}),
			"status: failed: the interpreter crashed; variables from earlier calls are lost\nstdout: (empty)\nstderr: (empty)\n", "failed"},
		{"reset", "", hostedtool.Outcome{RunResult: containerapi.RunResult{Result: sandbox.Result{Outcome: sandbox.OutcomeCompleted}, Reset: true}},
			"status: completed\nnote: this ran in a fresh Python interpreter: variables and imports from earlier calls are gone; the container's files in /mnt/data are there.\nstdout: (empty)\nstderr: (empty)\n", "completed"},
		{"files written", "", hostedtool.Outcome{RunResult: containerapi.RunResult{Result: sandbox.Result{Outcome: sandbox.OutcomeCompleted},
			Changed: []containerapi.File{{Path: "/mnt/data/out.csv", Bytes: 2048}}}},
			"status: completed\nstdout: (empty)\nstderr: (empty)\nfiles written: sandbox:/mnt/data/out.csv (2.0 KiB)\n", "completed"},
		{"bad arguments", `the arguments have no string field "code"`, hostedtool.Outcome{},
			"status: failed: invalid arguments (the arguments have no string field \"code\"); nothing was run. Call the tool with a JSON object like {\"code\": \"print(1 + 1)\"}.\n", "failed"},
		{"not run", "", hostedtool.Outcome{NotRun: "the container is busy"},
			"status: incomplete: not run because the container is busy.\n", "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Report(tc.argErr, tc.o); got != tc.want {
				t.Errorf("Report:\n%s\nwant:\n%s", got, tc.want)
			}
			if got := Status(tc.argErr, tc.o); got != tc.status {
				t.Errorf("Status %q, want %q", got, tc.status)
			}
			if got := (Action{ArgErr: tc.argErr}).ModelOutput(tc.o); got != tc.want {
				t.Errorf("Action.ModelOutput differs from Report: %q", got)
			}
		})
	}
}

// TestImages: which images are shown with which media type, and the line
// the model reads about them.
func TestImages(t *testing.T) {
	for _, tc := range []struct {
		name string
		img  sandbox.Image
		mt   string
		ok   bool
	}{
		{"declared png", sandbox.Image{MediaType: "image/png", Data: png}, "image/png", true},
		{"declared with a parameter: sniffed", sandbox.Image{MediaType: "image/png;base64,x", Data: png}, "image/png", true},
		{"declared text: sniffed", sandbox.Image{MediaType: "text/html", Data: png}, "image/png", true},
		{"not an image", sandbox.Image{MediaType: "text/plain", Data: []byte("hello")}, "", false},
		{"empty", sandbox.Image{MediaType: "image/png"}, "", false},
	} {
		if mt, ok := ImageMediaType(tc.img); mt != tc.mt || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.name, mt, ok, tc.mt, tc.ok)
		}
	}
	n, types := ShownImages([]sandbox.Image{{MediaType: "image/png", Data: png}, {Data: []byte("x")}, {MediaType: "image/jpeg", Data: png}, {MediaType: "image/png", Data: png}})
	if n != 3 || strings.Join(types, ",") != "image/png,image/jpeg" {
		t.Errorf("ShownImages = %d %v", n, types)
	}
	if ImagesLine(0, nil, true) != "" {
		t.Error("a line about no images")
	}
	shown, hidden := ImagesLine(2, []string{"image/png"}, true), ImagesLine(1, []string{"image/png"}, false)
	if !strings.Contains(shown, "2 images (image/png)") || !strings.Contains(hidden, "1 image (image/png)") || shown == hidden {
		t.Errorf("image lines: %q / %q", shown, hidden)
	}
	many := ImagesLine(5, []string{"image/png", "image/jpeg", "image/gif", "image/webp"}, true)
	if !strings.Contains(many, "image/gif, …)") || strings.Contains(many, "webp") {
		t.Errorf("more than three types: %q", many)
	}
}
