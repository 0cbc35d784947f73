package containerapi

import (
	"strconv"
	"strings"
	"unicode"
)

// How container files are named to the model, by this package's notes
// and by the interceptor's.

// QuotePath is a file's path as the model may read it: as it is when every
// character shows as itself, else Go-quoted with the others escaped
// ("\u202e"), so that a name cannot reorder the text around it (a bidi
// override) or break the line it is on (U+0085, U+2028).
func QuotePath(p string) string {
	for _, r := range p {
		if !unicode.IsGraphic(r) {
			return strconv.QuoteToGraphic(p)
		}
	}
	return p
}

// HumanBytes is n as the model reads sizes: "1.5 MiB", "12 bytes".
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// FileList is files as the model is told them, one "- path (size)" line
// each (QuotePath, HumanBytes), the first 50 and how many more.
func FileList(files []File) string {
	var b strings.Builder
	for k, f := range files {
		if k == 50 {
			b.WriteString("… and " + strconv.Itoa(len(files)-50) + " more\n")
			break
		}
		b.WriteString("- " + QuotePath(f.Path) + " (" + HumanBytes(f.Bytes) + ")\n")
	}
	return b.String()
}
