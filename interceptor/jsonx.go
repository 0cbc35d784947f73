package interceptor

import (
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The helpers here edit JSON text without decoding what they do not touch:
// a value we do not own is copied as its raw bytes, so fields and item types
// from newer API versions survive unchanged.

// field is one member of a JSON object, with its offsets in the object's raw
// text (start of the key, end of the value).
type field struct {
	key        string
	value      gjson.Result
	start, end int
}

// fields lists raw's members in order. raw must be a JSON object.
func fields(raw string) []field {
	var out []field
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		out = append(out, field{key: k.Str, value: v, start: k.Index, end: v.Index + len(v.Raw)})
		return true
	})
	return out
}

// object is a JSON object walked once: its members and, for lookups, the
// first member of each key. A large request is scanned once this way rather
// than once per field looked up.
type object struct {
	raw   string
	fs    []field
	first map[string]int
	dup   string // a key that occurs more than once, or ""
}

func parseObject(raw string) *object {
	o := &object{raw: raw, fs: topFields(raw)}
	o.first = make(map[string]int, len(o.fs))
	for i, f := range o.fs {
		if _, ok := o.first[f.key]; ok {
			if o.dup == "" {
				o.dup = f.key
			}
			continue
		}
		o.first[f.key] = i
	}
	return o
}

// get returns the member key's value (the first, as gjson would).
func (o *object) get(key string) gjson.Result {
	if i, ok := o.first[key]; ok {
		return o.fs[i].value
	}
	return gjson.Result{}
}

// edit changes one member of an object: set it to value (raw JSON), or
// delete it. A set for a key the object lacks appends the member.
type edit struct {
	key   string
	value string
	del   bool
}

func set(key, value string) edit { return edit{key: key, value: value} }
func del(key string) edit        { return edit{key: key, del: true} }

// editObject applies edits to the JSON object raw, keeping every other
// member's bytes and the members' order.
func editObject(raw string, edits ...edit) []byte {
	return appendEditedObject(make([]byte, 0, len(raw)+64), raw, edits...)
}

func appendEditedObject(dst []byte, raw string, edits ...edit) []byte {
	if !gjson.Parse(raw).IsObject() {
		return append(dst, raw...) // not ours to shape
	}
	return appendEditedFields(dst, raw, fields(raw), edits...)
}

func appendEditedFields(dst []byte, raw string, fs []field, edits ...edit) []byte {
	done := make([]bool, len(edits))
	dst = append(dst, '{')
	n := 0
	member := func() {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
	}
	for _, f := range fs {
		ei := -1
		for j := range edits {
			if edits[j].key == f.key {
				ei = j
				break
			}
		}
		if ei < 0 {
			member()
			dst = append(dst, raw[f.start:f.end]...)
			continue
		}
		done[ei] = true
		if edits[ei].del {
			continue
		}
		member()
		dst = appendString(dst, f.key)
		dst = append(dst, ':')
		dst = append(dst, edits[ei].value...)
	}
	for j, e := range edits {
		if done[j] || e.del {
			continue
		}
		member()
		dst = appendString(dst, e.key)
		dst = append(dst, ':')
		dst = append(dst, e.value...)
	}
	return append(dst, '}')
}

// duplicateKey returns a key that occurs twice in the object raw, or "".
// Parsers disagree on duplicates (gjson takes the first, most take the
// last), so an object we act on must not have any.
func duplicateKey(raw string) string {
	fs := fields(raw)
	if len(fs) < 2 {
		return ""
	}
	seen := make(map[string]struct{}, len(fs))
	for _, f := range fs {
		if _, ok := seen[f.key]; ok {
			return f.key
		}
		seen[f.key] = struct{}{}
	}
	return ""
}

// appendString appends s as a JSON string. Unlike encoding/json it leaves
// <, > and & alone (as OpenAI does); invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func jsonString(s string) string { return string(appendString(nil, s)) }

// appendArray appends a JSON array of raw elements.
func appendArray(dst []byte, elems []string) []byte {
	dst = append(dst, '[')
	for i, e := range elems {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e...)
	}
	return append(dst, ']')
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
