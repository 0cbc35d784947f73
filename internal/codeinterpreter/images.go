package codeinterpreter

import (
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// The model is only told how many figures a run made and their types: it
// is a text model, and the bytes would cost it tokens it cannot use. The
// client gets them as the protocol shows images (the Responses API: image
// entries in code_interpreter_call.outputs).

// MaxMediaTypeLen bounds a media type passed on. Real image types are a
// dozen characters; the bound keeps the model-facing line short whatever a
// provider reports.
const MaxMediaTypeLen = 64

// ImageMediaType is the media type an image is shown with, and whether it
// can be shown at all. A provider's type is trusted only when it is a clean
// image/* type (a parameter or a comma would change what a data URL means);
// otherwise the bytes are sniffed, and what does not sniff as an image is
// not shown (an "image" output the client cannot render is worse than none).
func ImageMediaType(img sandbox.Image) (string, bool) {
	if len(img.Data) == 0 {
		return "", false
	}
	if mt, params, err := mime.ParseMediaType(img.MediaType); err == nil && len(params) == 0 &&
		strings.HasPrefix(mt, "image/") && len(mt) <= MaxMediaTypeLen {
		return mt, true
	}
	mt, _, _ := strings.Cut(http.DetectContentType(img.Data), ";")
	if strings.HasPrefix(mt, "image/") {
		return mt, true
	}
	return "", false
}

// ShownImages is how many of a run's images the client is shown, and their
// distinct media types in order of first appearance.
func ShownImages(images []sandbox.Image) (n int, types []string) {
	for _, img := range images {
		mt, ok := ImageMediaType(img)
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

// ImagesLine tells the model about n images it cannot see, in one bounded
// line: whether the user saw them decides what the model may say about
// them. types are listed up to a few, since a line per image would grow
// with a loop that draws hundreds.
func ImagesLine(n int, types []string, shown bool) string {
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
