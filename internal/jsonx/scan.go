package jsonx

import (
	"strings"

	"github.com/tidwall/gjson"
)

// TopFields lists the members of the JSON object raw like Fields, but skips
// over values without decoding them: strings are crossed with a vectorised
// search for the closing quote, which makes the walk over a request whose
// bulk is conversation text several times faster than a byte-by-byte
// parser. raw should be valid JSON; on invalid input the result is
// unspecified but the walk never panics.
func TopFields(raw string) []Field {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	i++
	var out []Field
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] != '"' {
			return out // '}' or garbage
		}
		kStart := i
		kEnd := skipString(raw, i)
		if kEnd < 0 {
			return out
		}
		key := raw[kStart:kEnd]
		i = skipSpace(raw, kEnd)
		if i >= len(raw) || raw[i] != ':' {
			return out
		}
		i = skipSpace(raw, i+1)
		vStart := i
		vEnd := skipValue(raw, i)
		if vEnd < 0 {
			return out
		}
		v := parseValue(raw[vStart:vEnd])
		v.Index = vStart
		k := gjson.Parse(key)
		out = append(out, Field{Key: k.Str, Value: v, Start: kStart, End: vEnd})
		i = skipSpace(raw, vEnd)
		if i >= len(raw) || raw[i] != ',' {
			return out
		}
		i++
	}
}

// parseValue makes the gjson.Result of one whole value without rescanning a
// long string byte by byte (gjson.Parse would, to find its end).
func parseValue(v string) gjson.Result {
	if len(v) >= 2 && v[0] == '"' && !strings.Contains(v, `\`) {
		return gjson.Result{Type: gjson.String, Raw: v, Str: v[1 : len(v)-1]}
	}
	return gjson.Parse(v)
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just after the string starting at s[i]
// (a quote), or -1.
func skipString(s string, i int) int {
	i++
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		// An odd run of backslashes before the quote escapes it.
		bs := 0
		for k := i - 1; k >= 0 && s[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
}

// skipValue returns the index just after the value starting at s[i], or -1.
func skipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[j])) {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
