package jsonx

import (
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The helpers here edit JSON text without decoding what they do not touch:
// a value the caller does not own is copied as its raw bytes, so fields and
// item types from newer API versions survive unchanged.

// Field is one member of a JSON object, with its offsets in the object's
// raw text (Start of the key, End of the value).
type Field struct {
	Key        string
	Value      gjson.Result
	Start, End int
}

// Fields lists raw's members in order, as gjson reads them. raw must be a
// JSON object.
func Fields(raw string) []Field {
	var out []Field
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		out = append(out, Field{Key: k.Str, Value: v, Start: k.Index, End: v.Index + len(v.Raw)})
		return true
	})
	return out
}

// Object is a JSON object walked once (TopFields): its members and, for
// lookups, the first member of each key. A large request is scanned once
// this way rather than once per field looked up.
type Object struct {
	raw    string
	Fields []Field
	first  map[string]int
	Dup    string // a key that occurs more than once, or ""
}

// ParseObject walks the JSON object raw.
func ParseObject(raw string) *Object {
	o := &Object{raw: raw, Fields: TopFields(raw)}
	o.first = make(map[string]int, len(o.Fields))
	for i, f := range o.Fields {
		if _, ok := o.first[f.Key]; ok {
			if o.Dup == "" {
				o.Dup = f.Key
			}
			continue
		}
		o.first[f.Key] = i
	}
	return o
}

// Get returns the member key's value (the first, as gjson would).
func (o *Object) Get(key string) gjson.Result {
	if i, ok := o.first[key]; ok {
		return o.Fields[i].Value
	}
	return gjson.Result{}
}

// Edit changes one member of an object: Set it to a raw JSON value, or Del
// it. A Set for a key the object lacks appends the member.
type Edit struct {
	key   string
	value string
	del   bool
}

// Set sets the member key to value, raw JSON.
func Set(key, value string) Edit { return Edit{key: key, value: value} }

// Del deletes the member key.
func Del(key string) Edit { return Edit{key: key, del: true} }

// EditObject applies edits to the JSON object raw, keeping every other
// member's bytes and the members' order.
func EditObject(raw string, edits ...Edit) []byte {
	return AppendEditedObject(make([]byte, 0, len(raw)+64), raw, edits...)
}

// AppendEditedObject appends EditObject(raw, edits...) to dst; raw that is
// not an object is appended unchanged.
func AppendEditedObject(dst []byte, raw string, edits ...Edit) []byte {
	if !gjson.Parse(raw).IsObject() {
		return append(dst, raw...) // not ours to shape
	}
	return AppendEditedFields(dst, raw, Fields(raw), edits...)
}

// AppendEditedFields is AppendEditedObject for an object whose members
// fs are known (Fields, TopFields).
func AppendEditedFields(dst []byte, raw string, fs []Field, edits ...Edit) []byte {
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
			if edits[j].key == f.Key {
				ei = j
				break
			}
		}
		if ei < 0 {
			member()
			dst = append(dst, raw[f.Start:f.End]...)
			continue
		}
		done[ei] = true
		if edits[ei].del {
			continue
		}
		member()
		dst = AppendQuote(dst, f.Key)
		dst = append(dst, ':')
		dst = append(dst, edits[ei].value...)
	}
	for j, e := range edits {
		if done[j] || e.del {
			continue
		}
		member()
		dst = AppendQuote(dst, e.key)
		dst = append(dst, ':')
		dst = append(dst, e.value...)
	}
	return append(dst, '}')
}

// DuplicateKey returns a key that occurs twice in the object raw, or "".
// Parsers disagree on duplicates (gjson takes the first, most take the
// last), so an object we act on must not have any.
func DuplicateKey(raw string) string {
	fs := Fields(raw)
	if len(fs) < 2 {
		return ""
	}
	seen := make(map[string]struct{}, len(fs))
	for _, f := range fs {
		if _, ok := seen[f.Key]; ok {
			return f.Key
		}
		seen[f.Key] = struct{}{}
	}
	return ""
}

// AppendQuote appends s as a JSON string. Unlike encoding/json it leaves
// <, > and & alone (as OpenAI does); invalid UTF-8 becomes U+FFFD.
func AppendQuote(dst []byte, s string) []byte {
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

// Quote is s as a JSON string (AppendQuote).
func Quote(s string) string { return string(AppendQuote(nil, s)) }

// AppendArray appends a JSON array of raw elements.
func AppendArray(dst []byte, elems []string) []byte {
	dst = append(dst, '[')
	for i, e := range elems {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e...)
	}
	return append(dst, ']')
}

// TypeName names v's JSON type as OpenAI's validation messages do ("a
// string", "an array", "null", …): the one wording for the interceptor's and
// netpolicy's "expected …, but got …" errors.
func TypeName(v gjson.Result) string {
	switch v.Type {
	case gjson.Null:
		return "null"
	case gjson.False, gjson.True:
		return "a boolean"
	case gjson.Number:
		return "a number"
	case gjson.String:
		return "a string"
	}
	if v.IsArray() {
		return "an array"
	}
	return "an object"
}
