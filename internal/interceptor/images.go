package interceptor

import (
	"encoding/base64"
	"mime"
	"strings"

	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// Figures a run produced reach the client as OpenAI's hosted tool returns
// them: {"type":"image","url":"data:<media type>;base64,<data>"} entries in
// code_interpreter_call.outputs. The model is only told how many there were
// and their types (codeinterpreter.ImagesLine).

// appendImageOutput appends one image output entry, fields in OpenAI's order.
func appendImageOutput(dst []byte, mediaType string, data []byte) []byte {
	dst = append(dst, `{"type":"image","url":"data:`...)
	dst = append(dst, mediaType...) // a validated token: nothing to escape
	dst = append(dst, ";base64,"...)
	dst = base64.StdEncoding.AppendEncode(dst, data) // the alphabet needs no JSON escaping
	return append(dst, `"}`...)
}

// appendOutputs renders a call's outputs array as OpenAI does: the images,
// then the text, each entry only when there is something in it (a run that
// printed nothing has no logs entry, as a notebook cell without output has
// no stream output).
//
// OpenAI lists a cell's outputs in the order the notebook produced them, so
// its recordings show an image before the logs of the cell's final
// expression, and text printed before plt.show() ahead of the image. A
// sandbox.Result does not say where in the text an image appeared, so the
// images come first: that reproduces the recorded calls whose text is the
// cell's value, the usual way a chart cell ends.
//
// note, when set, is a last line of the logs saying why the call did not
// complete (interceptor.call_status: openai).
func appendOutputs(dst []byte, c *call, note string) []byte {
	dst = append(dst, '[')
	first := true
	if c.argErr != "" || c.notRun != "" {
		if note != "" { // nothing ran: the note is all there is
			dst = append(dst, `{"type":"logs","logs":`...)
			dst = jsonx.AppendQuote(dst, note)
			dst = append(dst, '}')
		}
		return append(dst, ']')
	}
	for _, img := range c.res.Images {
		mt, ok := codeinterpreter.ImageMediaType(img)
		if !ok {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendImageOutput(dst, mt, img.Data)
	}
	s := logs(c)
	if note != "" {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += note
	}
	if s != "" {
		if !first {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"logs","logs":`...)
		dst = jsonx.AppendQuote(dst, s)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// dataURLMediaType is the media type of a base64 data URL naming an image
// (as our outputs and OpenAI's carry), for telling the model what a replayed
// image was; any other URL gives false.
func dataURLMediaType(url string) (string, bool) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return "", false
	}
	head, _, ok := strings.Cut(rest, ",")
	if !ok {
		return "", false
	}
	mt, params, err := mime.ParseMediaType(strings.TrimSuffix(head, ";base64"))
	if err != nil || len(params) != 0 || !strings.HasPrefix(mt, "image/") || len(mt) > codeinterpreter.MaxMediaTypeLen {
		return "", false
	}
	return mt, true
}
