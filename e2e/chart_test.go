package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// chartCode is a chart conversation's code (pydantic-ai's return-image
// cassette): numpy + matplotlib, plt.show(), and the saved file's path as
// the cell's last value. The project's own, in the recording's shape, and
// when CODEINTERP_FIXTURES is set also what OpenAI's model ran.
type chartCode struct{ source, code string }

func chartCodes(t *testing.T) []chartCode {
	t.Helper()
	var out []chartCode
	for _, src := range fixtures.Sources(t, fixtures.ImageNonStreaming) {
		code := ""
		for _, tr := range src.Turns {
			for _, it := range gjson.Get(tr.Response, "output").Array() {
				if c := it.Get("code").Str; code == "" && it.Get("type").Str == "code_interpreter_call" && strings.Contains(c, "plt.show()") {
					code = c
				}
			}
		}
		if code == "" {
			t.Fatalf("fixture %s (%s) has no code_interpreter_call that shows a chart", fixtures.ImageNonStreaming, src.Name)
		}
		out = append(out, chartCode{src.Name, code})
	}
	return out
}

// TestChartImage: through extproc's whole path on the gVisor provider, a
// model whose code draws a matplotlib chart gets an image output that
// decodes as a PNG, stream and non-stream, while the model itself is told
// an image was shown and never sees its bytes.
func TestChartImage(t *testing.T) {
	sh := loadShapes(t)
	for _, cc := range chartCodes(t) {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", cc.source, stream), func(t *testing.T) { testChartImage(t, sh, cc.code, stream) })
		}
	}
}

func testChartImage(t *testing.T, sh shapes, code string, stream bool) {
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(code)}}
		}
		out := lastOutputs(c)[0].Get("output").Str
		if !strings.Contains(out, "image") || strings.Contains(out, "iVBOR") || len(out) > 4096 {
			t.Errorf("the model was told %.300q; want a note that an image was shown, without its bytes", out)
		}
		if !strings.Contains(out, "/mnt/data/y_equals_x_squared.png") {
			t.Errorf("the model was not shown the cell's value: %.300q", out)
		}
		return reply{items: []string{m.message("Here is the chart of y = x^2.")}}
	}, stackOptions{provider: "gvisor"})
	m = s.model
	r, evs, err := ask(context.Background(), t, s, ciParams("Create a chart of y=x^2 for x=-5 to 5", true), stream)
	if err != nil {
		t.Fatal(err)
	}
	calls := ciCalls(r)
	if len(calls) != 1 {
		t.Fatalf("output types %v, want one code_interpreter_call", outputTypes(r))
	}
	ci := calls[0]
	if ci.Status != responses.ResponseCodeInterpreterToolCallStatusCompleted {
		t.Fatalf("call status %s: %s", ci.Status, ci.RawJSON())
	}
	var kinds []string
	var img []byte
	for _, o := range ci.Outputs {
		kinds = append(kinds, o.Type)
		if o.Type == "image" {
			b64, ok := strings.CutPrefix(o.URL, "data:image/png;base64,")
			if !ok {
				t.Fatalf("image url %.60q is not a PNG data URL", o.URL)
			}
			if img, err = base64.StdEncoding.DecodeString(b64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(kinds) != 2 || kinds[0] != "image" || kinds[1] != "logs" {
		t.Fatalf("outputs %v, want [image logs] as OpenAI's recording", kinds)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("the image does not decode as a PNG: %v", err)
	}
	// figsize=(6, 4): the aspect ratio survives whatever dpi and
	// tight bounding box the kernel renders with.
	if cfg.Width < 300 || cfg.Height < 200 || float64(cfg.Width)/float64(cfg.Height) < 1.3 || float64(cfg.Width)/float64(cfg.Height) > 1.7 {
		t.Errorf("chart is %dx%d, want about 3:2 (figsize 6x4)", cfg.Width, cfg.Height)
	}
	if got := ci.Outputs[1].Logs; !strings.Contains(got, "'/mnt/data/y_equals_x_squared.png'") {
		t.Errorf("logs %q, want the cell's value as in the recording", got)
	}
	if stream {
		checkStream(t, sh, evs, true)
		var done bool
		for _, ev := range evs {
			if ev.Type == "response.output_item.done" && ev.Item.Type == "code_interpreter_call" {
				done = strings.Contains(ev.Item.RawJSON(), "data:image/png;base64,")
			}
		}
		if !done {
			t.Errorf("response.output_item.done of the call carries no image")
		}
	}
	if r.OutputText() != "Here is the chart of y = x^2." {
		t.Errorf("output text %q", r.OutputText())
	}
}
