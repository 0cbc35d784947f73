package interceptor

import (
	"encoding/base64"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Figures a run produced reach the client as OpenAI's hosted tool returns
// them: {"type":"image","url":"data:<media type>;base64,<data>"} entries in
// code_interpreter_call.outputs. The model is only told how many there were
// and their types: it is a text model, and the bytes would cost it tokens it
// cannot use.

// maxMediaTypeLen bounds a media type we pass on. Real image types are a
// dozen characters; the bound keeps the model-facing line short whatever a
// provider reports.
const maxMediaTypeLen = 64

// imageMediaType is the media type an image is shown with, and whether it
// can be shown at all. A provider's type is trusted only when it is a clean
// image/* type (a parameter or a comma would change what the data URL means);
// otherwise the bytes are sniffed, and what does not sniff as an image is
// not shown (an "image" output the client cannot render is worse than none).
func imageMediaType(img sandbox.Image) (string, bool) {
	if len(img.Data) == 0 {
		return "", false
	}
	if mt, params, err := mime.ParseMediaType(img.MediaType); err == nil && len(params) == 0 &&
		strings.HasPrefix(mt, "image/") && len(mt) <= maxMediaTypeLen {
		return mt, true
	}
	mt, _, _ := strings.Cut(http.DetectContentType(img.Data), ";")
	if strings.HasPrefix(mt, "image/") {
		return mt, true
	}
	return "", false
}

// shownImages is how many of a run's images the client is shown, and their
// distinct media types in order of first appearance.
func shownImages(images []sandbox.Image) (n int, types []string) {
	for _, img := range images {
		mt, ok := imageMediaType(img)
		if !ok {
			continue
		}
		n++
		if !slices.Contains(types, mt) {
			types = append(types, mt)
		}
	}
	return n, types
}

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
		mt, ok := imageMediaType(img)
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

// imagesLine tells the model about n images it cannot see, in one bounded
// line: whether the user saw them decides what the model may say about them.
// types are listed up to a few, since a line per image would grow with a
// loop that draws hundreds.
func imagesLine(n int, types []string, shown bool) string {
	if n == 0 {
		return ""
	}
	const maxTypes = 3
	noun, verb, pron := "image", "was", "it"
	if n > 1 {
		noun, verb, pron = "images", "were", "them"
	}
	desc := strconv.Itoa(n) + " " + noun
	if len(types) > 0 {
		list := types[:min(len(types), maxTypes)]
		desc += " (" + strings.Join(list, ", ")
		if len(types) > maxTypes {
			desc += ", …"
		}
		desc += ")"
	}
	if shown {
		return "images: " + desc + " " + verb + " shown to the user with this call's output; you cannot see " + pron + ".\n"
	}
	return "images: " + desc + " " + verb + " made, but this request did not ask for code outputs, so the user does not see " + pron + " either.\n"
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
	if err != nil || len(params) != 0 || !strings.HasPrefix(mt, "image/") || len(mt) > maxMediaTypeLen {
		return "", false
	}
	return mt, true
}
