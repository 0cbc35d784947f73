package interceptor

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// testPNG encodes a real w×h PNG (a gradient, so every image differs by
// size) with Go's own encoder: the bytes a plotting library would hand over.
func testPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(x * 255 / max(w-1, 1)), G: uint8(y * 255 / max(h-1, 1)), B: 0x80, A: 0xff})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// decodeDataURL checks a data URL is base64 PNG and returns its bytes,
// decoded as a PNG to prove they are one.
func decodeDataURL(t testing.TB, url string) []byte {
	t.Helper()
	b64, ok := strings.CutPrefix(url, "data:image/png;base64,")
	if !ok {
		t.Fatalf("not a PNG data URL: %.60s…", url)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("data URL is not standard base64: %v", err)
	}
	if _, err := png.Decode(bytes.NewReader(data)); err != nil {
		t.Fatalf("data URL is not a PNG: %v", err)
	}
	return data
}

// ciLoop is a finished loop's state as ciItem reads it.
func ciLoop(include bool) *loop { return ciLoopStatus(include, CallStatusOpenAI) }

// ciLoopStatus is ciLoop with interceptor.call_status set.
func ciLoopStatus(include bool, callStatus string) *loop {
	ic := &Interceptor{cfg: Config{CallStatus: callStatus}}
	return &loop{x: &Exchange{ic: ic, req: request{includeOutputs: include}}, containerID: "cntr_img"}
}

// TestCodeInterpreterCallImageOutputs: outputs with and without include,
// images before the text, no logs entry without text, several images in
// order, what cannot be shown dropped, nothing for calls that did not run.
func TestCodeInterpreterCallImageOutputs(t *testing.T) {
	p1, p2 := testPNG(t, 3, 2), testPNG(t, 5, 4)
	u1 := "data:image/png;base64," + base64.StdEncoding.EncodeToString(p1)
	u2 := "data:image/png;base64," + base64.StdEncoding.EncodeToString(p2)
	img := func(d []byte) sandbox.Image { return sandbox.Image{MediaType: "image/png", Data: d} }
	imgOut := func(u string) string { return `{"type":"image","url":"` + u + `"}` }
	cases := []struct {
		name    string
		include bool
		c       call
		status  string // with call_status: detailed
		outputs string
		// openaiOutputs are the outputs with call_status: openai, whose
		// status is always "completed", where they differ.
		openaiOutputs string
	}{
		{"not included: null", false,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "x\n", Images: []sandbox.Image{img(p1)}}},
			"completed", `null`, ""},
		{"image before the logs", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "'/mnt/data/plot.png'", Images: []sandbox.Image{img(p1)}}},
			"completed", `[` + imgOut(u1) + `,{"type":"logs","logs":"'/mnt/data/plot.png'"}]`, ""},
		{"no text: no logs entry", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Images: []sandbox.Image{img(p1)}}},
			"completed", `[` + imgOut(u1) + `]`, ""},
		{"nothing at all", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted}},
			"completed", `[]`, ""},
		{"several images in order, then stdout and stderr", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "done", Stderr: "UserWarning: w\n", Images: []sandbox.Image{img(p2), img(p1), img(p2)}}},
			"completed", `[` + imgOut(u2) + `,` + imgOut(u1) + `,` + imgOut(u2) + `,{"type":"logs","logs":"done\nUserWarning: w\n"}]`, ""},
		{"exception after a figure keeps the figure", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeError, Stderr: "ValueError\n", Images: []sandbox.Image{img(p1)}}},
			"failed", `[` + imgOut(u1) + `,{"type":"logs","logs":"ValueError\n"}]`, ""},
		{"missing or odd media types are sniffed; non-images and empty data dropped", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Images: []sandbox.Image{
				{Data: p1},
				{MediaType: "image/png;x=1", Data: p2},
				{MediaType: "image/png, text/html", Data: p1},
				{MediaType: "text/html", Data: []byte("<html>not an image</html>")},
				{MediaType: "image/png"},
			}}},
			"completed", `[` + imgOut(u1) + `,` + imgOut(u2) + `,` + imgOut(u1) + `]`, ""},
		{"bad arguments: nothing ran", true,
			call{argErr: "the arguments are missing", res: sandbox.Result{Images: []sandbox.Image{img(p1)}}},
			"failed", `[]`, `[{"type":"logs","logs":"[not run: invalid arguments (the arguments are missing)]"}]`},
		{"not run", true,
			call{notRun: "a limit", res: sandbox.Result{Images: []sandbox.Image{img(p1)}}},
			"incomplete", `[]`, `[{"type":"logs","logs":"[not run: a limit]"}]`},
		{"time limit", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeTimeout, Stdout: "partial", Detail: "30s"}},
			"incomplete", `[{"type":"logs","logs":"partial"}]`,
			`[{"type":"logs","logs":"partial\n[incomplete: the run hit the time limit and was stopped; variables from earlier calls are lost (30s)]"}]`},
		{"memory limit, no output", true,
			call{res: sandbox.Result{Outcome: sandbox.OutcomeMemoryLimit}},
			"incomplete", `[]`,
			`[{"type":"logs","logs":"[incomplete: the run hit the memory limit and was stopped; variables from earlier calls are lost]"}]`},
	}
	for _, tc := range cases {
		for _, mode := range []string{CallStatusDetailed, CallStatusOpenAI} {
			t.Run(tc.name+" "+mode, func(t *testing.T) {
				c := tc.c
				c.ciID, c.code = "ci_img", "plot()"
				item := ciLoopStatus(tc.include, mode).ciItem(&c, tc.include)
				status, outputs := tc.status, tc.outputs
				if mode == CallStatusOpenAI {
					status = "completed"
					if tc.openaiOutputs != "" {
						outputs = tc.openaiOutputs
					}
				}
				want := `{"id":"ci_img","type":"code_interpreter_call","status":"` + status + `","code":"plot()","container_id":"cntr_img","outputs":` + outputs + `}`
				if item != want {
					t.Fatalf("item\n got %.400s\nwant %.400s", item, want)
				}
				// A client's view: openai-go's union gives each image's URL.
				var ci responses.ResponseCodeInterpreterToolCall
				if err := ci.UnmarshalJSON([]byte(item)); err != nil {
					t.Fatal(err)
				}
				var wantImgs [][]byte
				for _, im := range c.res.Images {
					if _, ok := codeinterpreter.ImageMediaType(im); ok && c.argErr == "" && c.notRun == "" && tc.include {
						wantImgs = append(wantImgs, im.Data)
					}
				}
				var gotImgs [][]byte
				for _, o := range ci.Outputs {
					if v, ok := o.AsAny().(responses.ResponseCodeInterpreterToolCallOutputImage); ok {
						gotImgs = append(gotImgs, decodeDataURL(t, v.URL))
					}
				}
				if !slices.EqualFunc(gotImgs, wantImgs, bytes.Equal) {
					t.Fatalf("openai-go decoded %d images, want %d (bytes must round-trip)", len(gotImgs), len(wantImgs))
				}
			})
		}
	}
}

// recordedCI is a recorded code_interpreter_call item and a call that
// reproduces it: the recording's own PNG bytes and text as the Result.
func recordedCI(t *testing.T, item gjson.Result) *call {
	t.Helper()
	c := &call{ciID: item.Get("id").Str, code: item.Get("code").Str, res: sandbox.Result{Outcome: sandbox.OutcomeCompleted}}
	item.Get("outputs").ForEach(func(_, o gjson.Result) bool {
		switch o.Get("type").Str {
		case "image":
			c.res.Images = append(c.res.Images, sandbox.Image{MediaType: "image/png", Data: decodeDataURL(t, o.Get("url").Str)})
		case "logs":
			c.res.Stdout += o.Get("logs").Str
		default:
			t.Fatalf("recorded output of unknown type: %.200s", o.Raw)
		}
		return true
	})
	if len(c.res.Images) == 0 {
		t.Fatalf("recorded item has no image output")
	}
	return c
}

// TestImageOutputsMatchOpenAIRecording: given what OpenAI's run produced
// (the PNG and text of the item), our item is OpenAI's: in the stream's raw
// JSON (the one place the recording keeps OpenAI's field order) byte for
// byte, and in the buffered answer field for field. Against the items in
// the recorded shapes, and the recordings themselves when
// CODEINTERP_FIXTURES is set.
func TestImageOutputsMatchOpenAIRecording(t *testing.T) {
	for _, src := range fixtures.Sources(t, fixtures.ImageStreaming) {
		t.Run("stream/"+src.Name, func(t *testing.T) {
			var ref gjson.Result
			for _, e := range src.Turns[0].Events {
				if e.Get("type").Str == "response.output_item.done" && e.Get("item.type").Str == "code_interpreter_call" {
					ref = e.Get("item")
				}
			}
			if !ref.Exists() {
				t.Fatal("recorded stream has no code_interpreter_call item")
			}
			l := ciLoop(true)
			l.containerID = ref.Get("container_id").Str
			if got := l.ciItem(recordedCI(t, ref), true); got != ref.Raw {
				t.Fatalf("our item differs from OpenAI's\n got %.300s … %s\nwant %.300s … %s", got, tail(got), ref.Raw, tail(ref.Raw))
			}
		})
	}
	for _, src := range fixtures.Sources(t, fixtures.ImageNonStreaming) {
		t.Run("buffered/"+src.Name, func(t *testing.T) {
			// VCR.py wrote these bodies with sorted keys, so only field sets,
			// types and values are compared.
			var refs []gjson.Result
			for _, tu := range src.Turns {
				gjson.Get(tu.Response, "output").ForEach(func(_, it gjson.Result) bool {
					if it.Get("type").Str == "code_interpreter_call" {
						refs = append(refs, it)
					}
					return true
				})
			}
			if len(refs) != 2 {
				t.Fatalf("recording has %d code_interpreter_call items, want 2", len(refs))
			}
			for _, ref := range refs {
				l := ciLoop(true)
				l.containerID = ref.Get("container_id").Str
				got := gjson.Parse(l.ciItem(recordedCI(t, ref), true))
				if k, wk := keys(got), keys(ref); !slices.Equal(k, wk) {
					t.Errorf("item fields %v, OpenAI's %v", k, wk)
				}
				refShapes := map[string]bool{}
				ref.Get("outputs").ForEach(func(_, o gjson.Result) bool { refShapes[outputShape(o)] = true; return true })
				got.Get("outputs").ForEach(func(_, o gjson.Result) bool {
					if !refShapes[outputShape(o)] {
						t.Errorf("output entry shape %s not among OpenAI's %v", outputShape(o), refShapes)
					}
					return true
				})
			}
			// The first call is a chart cell ending in an expression: OpenAI's
			// outputs are [image, logs], exactly what we produce.
			l := ciLoop(true)
			l.containerID = refs[0].Get("container_id").Str
			if got := gjson.Get(l.ciItem(recordedCI(t, refs[0]), true), "outputs"); !jsonEqual(got, refs[0].Get("outputs")) {
				t.Errorf("outputs differ from OpenAI's for the first call")
			}
			// The second printed a warning before plt.show(): OpenAI interleaves
			// [logs, image, logs] in notebook order. A Result does not carry that
			// order, so ours is [image, logs]; pin it so a change is deliberate.
			var types []string
			refs[1].Get("outputs.#.type").ForEach(func(_, v gjson.Result) bool { types = append(types, v.Str); return true })
			if strings.Join(types, ",") != "logs,image,logs" {
				t.Errorf("recorded second call outputs %v", types)
			}
		})
	}
}

// outputShape is an output entry's fields and their JSON types.
func outputShape(o gjson.Result) string {
	var s []string
	o.ForEach(func(k, v gjson.Result) bool { s = append(s, k.Str+":"+v.Type.String()); return true })
	slices.Sort(s)
	return o.Get("type").Str + "{" + strings.Join(s, ",") + "}"
}

// jsonEqual compares two JSON values ignoring object key order.
func jsonEqual(a, b gjson.Result) bool {
	if a.IsObject() != b.IsObject() || a.IsArray() != b.IsArray() {
		return false
	}
	switch {
	case a.IsArray():
		x, y := a.Array(), b.Array()
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case a.IsObject():
		if !slices.Equal(keys(a), keys(b)) {
			return false
		}
		eq := true
		a.ForEach(func(k, v gjson.Result) bool { eq = jsonEqual(v, b.Get(escapePath(k.Str))); return eq })
		return eq
	}
	return a.Type == b.Type && a.Value() == b.Value()
}

// TestModelIsToldOfImagesNotTheirBytes: the function_call_output names the
// images in one line, bounded however many there are and whatever types a
// provider reports, and never carries their data.
func TestModelIsToldOfImagesNotTheirBytes(t *testing.T) {
	p := testPNG(t, 40, 30)
	b64 := base64.StdEncoding.EncodeToString(p)
	var many []sandbox.Image
	for i := range 500 {
		many = append(many, sandbox.Image{MediaType: fmt.Sprintf("image/x-kind-%d", i), Data: p})
	}
	many = append(many, sandbox.Image{MediaType: "image/" + strings.Repeat("y", 5000), Data: p})
	cases := []struct {
		name   string
		images []sandbox.Image
		shown  bool
		want   string
	}{
		{"one, shown", []sandbox.Image{{MediaType: "image/png", Data: p}}, true,
			"images: 1 image (image/png) was shown to the user with this call's output; you cannot see it.\n"},
		{"two, one sniffed", []sandbox.Image{{MediaType: "image/png", Data: p}, {Data: p}}, true,
			"images: 2 images (image/png) were shown to the user with this call's output; you cannot see them.\n"},
		{"not shown", []sandbox.Image{{MediaType: "image/png", Data: p}}, false,
			"images: 1 image (image/png) was made, but this request did not ask for code outputs, so the user does not see it either.\n"},
		{"none showable", []sandbox.Image{{MediaType: "text/plain", Data: []byte("hi")}}, true, ""},
		{"hundreds", many, true,
			"images: 501 images (image/x-kind-0, image/x-kind-1, image/x-kind-2, …) were shown to the user with this call's output; you cannot see them.\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "ok\n", Images: tc.images}}
			out := modelOutput(c, tc.shown)
			want := "status: completed\nstdout:\nok\nstderr: (empty)\n" + tc.want
			if out != want {
				t.Fatalf("model output\n got %q\nwant %q", out, want)
			}
			if strings.Contains(out, b64[:32]) || strings.Contains(out, "base64") || len(out) > 300 {
				t.Fatalf("model output carries image data or grew unbounded (%d bytes)", len(out))
			}
		})
	}
}

// TestReplayedImagesBecomeText: a client replaying our code_interpreter_call
// (images and all) gets the upstream a function_call_output that says what
// was shown, without the bytes.
func TestReplayedImagesBecomeText(t *testing.T) {
	ic := newRewriter(t, nil)
	c := ciLoop(true)
	call := &call{ciID: "ci_r", code: "plot()", res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "'/mnt/data/a.png'",
		Images: []sandbox.Image{{MediaType: "image/png", Data: testPNG(t, 8, 8)}}}}
	item := c.ciItem(call, true)
	body := `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":[` + item +
		`,{"id":"ci_u","type":"code_interpreter_call","status":"completed","code":"x","container_id":"c","outputs":[{"type":"image","url":"https://example.invalid/i.png"}]}]}`
	x, err := ic.RewriteRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	in := gjson.GetBytes(x.UpstreamBody(), "input").Array()
	if len(in) != 4 || in[1].Get("type").Str != "function_call_output" || in[3].Get("type").Str != "function_call_output" {
		t.Fatalf("upstream input: %.500s", gjson.GetBytes(x.UpstreamBody(), "input").Raw)
	}
	if got, want := in[1].Get("output").Str, "status: completed\noutput:\n'/mnt/data/a.png'\nimages: 1 image (image/png) was shown to the user with this call's output; you cannot see it.\n"; got != want {
		t.Errorf("replayed output\n got %q\nwant %q", got, want)
	}
	if got, want := in[3].Get("output").Str, "status: completed\noutput:\nimages: 1 image was shown to the user with this call's output; you cannot see it.\n"; got != want {
		t.Errorf("replayed URL image\n got %q\nwant %q", got, want)
	}
	if strings.Contains(string(x.UpstreamBody()), "base64") {
		t.Errorf("image bytes reached the upstream")
	}
}

// TestSSEImageOutputs: the stream adds the call with empty outputs ([] as
// OpenAI sends when they were asked for), sends no image-specific event, and
// carries the images in output_item.done and response.completed, which
// openai-go decodes to the same PNG bytes.
func TestSSEImageOutputs(t *testing.T) {
	p := testPNG(t, 7, 5)
	c := &call{ciID: "ci_s", code: "plt.show()", res: sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "shown\n",
		Images: []sandbox.Image{{MediaType: "image/png", Data: p}}}}
	item := ciLoop(true).ciItem(c, true)
	final := `{"id":"resp_s","object":"response","created_at":1,"status":"completed","model":"m","output":[` + item +
		`,{"id":"msg_s","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Here it is."}]}]}`
	body := sse.EventStream([]byte(final), true)
	evs := parseSSE(t, string(body))
	fixtures.CheckStreamInvariants(t, evs)
	var names []string
	for _, e := range evs {
		if strings.Contains(e.Name, "image") {
			t.Errorf("image-specific event %s: OpenAI's recorded stream has none", e.Name)
		}
		if e.Data.Get("item.type").Str != "code_interpreter_call" {
			continue
		}
		names = append(names, e.Name)
		switch e.Name {
		case "response.output_item.added":
			if e.Data.Get("item.outputs").Raw != "[]" {
				t.Errorf("added: outputs %s, want []", e.Data.Get("item.outputs").Raw)
			}
		case "response.output_item.done":
			if e.Data.Get("item").Raw != item {
				t.Errorf("done item differs from the spliced item")
			}
		}
	}
	if !slices.Equal(names, []string{"response.output_item.added", "response.output_item.done"}) {
		t.Errorf("item events %v", names)
	}
	var sawDone, sawCompleted bool
	for _, ev := range decodeStream(t, body) {
		switch v := ev.AsAny().(type) {
		case responses.ResponseOutputItemAddedEvent:
			if v.Item.Type == "code_interpreter_call" && len(v.Item.AsCodeInterpreterCall().Outputs) != 0 {
				t.Errorf("added item has outputs")
			}
		case responses.ResponseOutputItemDoneEvent:
			if v.Item.Type == "code_interpreter_call" {
				sawDone = true
				checkImageCall(t, v.Item.AsCodeInterpreterCall(), p, "shown\n")
			}
		case responses.ResponseCompletedEvent:
			sawCompleted = true
			checkImageCall(t, v.Response.Output[0].AsCodeInterpreterCall(), p, "shown\n")
		}
	}
	if !sawDone || !sawCompleted {
		t.Fatalf("done %v completed %v", sawDone, sawCompleted)
	}

	// Without include the item is added and done with null outputs.
	item = ciLoop(false).ciItem(c, false)
	for _, e := range parseSSE(t, string(sse.EventStream([]byte(`{"id":"r","object":"response","status":"completed","output":[`+item+`]}`), false))) {
		if e.Data.Get("item.type").Str == "code_interpreter_call" && e.Data.Get("item.outputs").Type != gjson.Null {
			t.Errorf("%s: outputs %s, want null", e.Name, e.Data.Get("item.outputs").Raw)
		}
	}
}

// checkImageCall: one image output with the PNG, then the logs.
func checkImageCall(t *testing.T, ci responses.ResponseCodeInterpreterToolCall, png []byte, logs string) {
	t.Helper()
	if len(ci.Outputs) != 2 || ci.Outputs[0].Type != "image" || ci.Outputs[1].Type != "logs" {
		t.Fatalf("outputs: %.300s", ci.RawJSON())
	}
	if got := decodeDataURL(t, ci.Outputs[0].AsImage().URL); !bytes.Equal(got, png) {
		t.Errorf("PNG bytes did not round-trip")
	}
	if ci.Outputs[1].AsLogs().Logs != logs {
		t.Errorf("logs %q, want %q", ci.Outputs[1].AsLogs().Logs, logs)
	}
}

// resultProvider is a sandbox.Provider whose sessions answer every run
// with the next of a fixed list of Results. It exists only because the real
// sandbox the loop tests use (CPython-WASI) has no plotting library, so it
// never returns images; each Result is the value a plotting provider returns
// (real PNG bytes from image/png, the outcome and text of a chart cell). The
// loop's use of the real sandbox is covered by loop_test.go.
type resultProvider struct {
	t       *testing.T
	mu      sync.Mutex
	results []sandbox.Result
	codes   []string // the code of each run, in order
}

func (p *resultProvider) Open(context.Context, sandbox.SessionOptions) (sandbox.Session, error) {
	return resultSession{p}, nil
}
func (p *resultProvider) Ready(context.Context) error { return nil }
func (p *resultProvider) Capacity() sandbox.Capacity  { return sandbox.Capacity{Max: 1} }
func (p *resultProvider) Close() error                { return nil }
func (p *resultProvider) Environment() sandbox.Environment {
	return sandbox.Environment{Provider: "result", PythonVersion: "3.13", Packages: []string{"matplotlib"}, Images: true}
}

type resultSession struct{ p *resultProvider }

func (s resultSession) ID() string { return "result-session" }
func (s resultSession) Run(_ context.Context, code string) (sandbox.Result, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.codes = append(s.p.codes, code)
	if len(s.p.results) == 0 {
		s.p.t.Errorf("run beyond the scripted results: %q", code)
		return sandbox.Result{}, sandbox.ErrClosed
	}
	r := s.p.results[0]
	s.p.results = s.p.results[1:]
	return r, nil
}
func (s resultSession) Close() error                                    { return nil }
func (s resultSession) WriteFile(context.Context, string, []byte) error { return nil }
func (s resultSession) ReadFile(context.Context, string, int64) ([]byte, error) {
	return nil, sandbox.ErrNotExist
}
func (s resultSession) ListFiles(context.Context, string) (sandbox.Listing, error) {
	return sandbox.Listing{}, nil
}
func (s resultSession) RemoveFiles(context.Context, []string) error { return nil }
func (s resultSession) Generation() uint64                          { return 1 }
func (s resultSession) Checkpoint(context.Context) ([]byte, error) {
	return nil, sandbox.ErrNoCheckpoint
}

// TestLoopImagesEndToEnd: a chart cell's Result goes through the whole
// loop behind HTTP: openai-go gets the PNG back (buffered and streamed), and
// the model's follow-up says an image was shown, without its bytes.
func TestLoopImagesEndToEnd(t *testing.T) {
	p := testPNG(t, 64, 48)
	const code = "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()\n'/mnt/data/plot.png'"
	for _, tc := range []struct {
		name             string
		stream, include  bool
		wantLine         string
		wantImagesOnWire bool
	}{
		{"buffered", false, true, "images: 1 image (image/png) was shown to the user", true},
		{"stream", true, true, "images: 1 image (image/png) was shown to the user", true},
		{"not included", false, false, "images: 1 image (image/png) was made, but this request did not ask", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prov := &resultProvider{t: t, results: []sandbox.Result{{Outcome: sandbox.OutcomeCompleted, Stdout: "'/mnt/data/plot.png'\n",
				Images: []sandbox.Image{{MediaType: "image/png", Data: p}}}}}
			up := newScriptedUpstream(t,
				step{items: []string{fcItem("call_p", code)}},
				step{
					check: func(t *testing.T, req gjson.Result) {
						out := outputOf(t, req, "call_p")
						if !strings.Contains(out, tc.wantLine) || !strings.Contains(out, "'/mnt/data/plot.png'") {
							t.Errorf("model told %q", out)
						}
						if strings.Contains(req.Raw, "base64") || strings.Contains(req.Raw, "iVBOR") {
							t.Errorf("image bytes reached the model")
						}
					},
					items: []string{msgItem("Here is the chart.")},
				},
			)
			ic := newLoopInterceptor(t, prov, nil)
			_, client := gateway(t, ic, up)
			params := ciParams(func(rp *responses.ResponseNewParams) {
				if tc.include {
					withOutputs(rp)
				}
			})
			var r *responses.Response
			if tc.stream {
				stream := client.Responses.NewStreaming(context.Background(), params)
				for stream.Next() {
					if v, ok := stream.Current().AsAny().(responses.ResponseCompletedEvent); ok {
						r = &v.Response
					}
				}
				if err := stream.Err(); err != nil || r == nil {
					t.Fatalf("stream: %v (completed: %v)", err, r != nil)
				}
			} else {
				var err error
				if r, err = client.Responses.New(context.Background(), params); err != nil {
					t.Fatal(err)
				}
			}
			calls := codeCalls(t, r)
			if len(calls) != 1 || calls[0].Code != code || calls[0].Status != "completed" {
				t.Fatalf("calls: %s", r.RawJSON())
			}
			if !tc.wantImagesOnWire {
				if calls[0].Outputs != nil || !strings.Contains(calls[0].RawJSON(), `"outputs":null`) {
					t.Errorf("outputs should be null: %.300s", calls[0].RawJSON())
				}
				return
			}
			checkImageCall(t, calls[0], p, "'/mnt/data/plot.png'\n")
			if r.OutputText() != "Here is the chart." {
				t.Errorf("answer %q", r.OutputText())
			}
		})
	}
}
