package sse

import (
	"math/rand/v2"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"

	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// Field is one field of an event: a key and its raw JSON value.
type Field struct {
	Key, Value string
}

// Writer renders events as OpenAI sends them: "event: <type>" and
// "data: <json>" lines and a blank line, the JSON starting with "type" and
// the other fields in key order, sequence_number counting from 0.
// Obfuscate adds the "obfuscation" padding to delta events, as OpenAI does
// unless the request turns it off.
type Writer struct {
	buf       []byte
	seq       int
	Obfuscate bool
}

// Bytes are the events written since the last Reset.
func (w *Writer) Bytes() []byte { return w.buf }

// Reset forgets the events written (they went out); the numbering goes on.
func (w *Writer) Reset() { w.buf = w.buf[:0] }

// Event writes one event of type typ with the fields fs (raw JSON values;
// their order does not matter) and the next sequence_number.
func (w *Writer) Event(typ string, fs ...Field) {
	// Insertion sort: a handful of fields, and no allocation.
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].Key < fs[j-1].Key; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: {\"type\":"...)
	w.buf = jsonx.AppendQuote(w.buf, typ)
	seqDone := false
	for _, f := range fs {
		if !seqDone && f.Key > "sequence_number" {
			w.buf = w.appendSeq(w.buf)
			seqDone = true
		}
		w.buf = append(w.buf, ',')
		w.buf = jsonx.AppendQuote(w.buf, f.Key)
		w.buf = append(w.buf, ':')
		w.buf = append(w.buf, f.Value...)
	}
	if !seqDone {
		w.buf = w.appendSeq(w.buf)
	}
	w.buf = append(w.buf, "}\n\n"...)
	w.seq++
}

func (w *Writer) appendSeq(dst []byte) []byte {
	dst = append(dst, `,"sequence_number":`...)
	return strconv.AppendInt(dst, int64(w.seq), 10)
}

// deltas writes one delta event per chunk of text; extra are the event's
// other fields (at most 4).
func (w *Writer) deltas(typ, text string, extra ...Field) {
	var arr [6]Field
	for _, chunk := range Chunks(text) {
		fs := append(arr[:0], Field{"delta", jsonx.Quote(chunk)})
		fs = append(fs, extra...)
		if w.Obfuscate {
			fs = append(fs, Field{"obfuscation", obfuscation(chunk)})
		}
		w.Event(typ, fs...)
	}
}

// Delta writes one delta event of exactly text (the live path passes the
// model's own pieces on); extra are the event's other fields (at most 4).
func (w *Writer) Delta(typ, text string, extra ...Field) {
	var arr [6]Field
	fs := append(arr[:0], Field{"delta", jsonx.Quote(text)})
	fs = append(fs, extra...)
	if w.Obfuscate {
		fs = append(fs, Field{"obfuscation", obfuscation(text)})
	}
	w.Event(typ, fs...)
}

// Passthrough writes an upstream event as it came, keeping its fields and
// their order, with our sequence_number and, when outputIndex >= 0, the
// spliced output_index. Without obfuscation the upstream's padding goes.
func (w *Writer) Passthrough(typ string, ev gjson.Result, outputIndex int) {
	var arr [3]jsonx.Edit
	edits := append(arr[:0], jsonx.Set("sequence_number", strconv.Itoa(w.seq)))
	if outputIndex >= 0 {
		edits = append(edits, jsonx.Set("output_index", strconv.Itoa(outputIndex)))
	}
	if !w.Obfuscate {
		edits = append(edits, jsonx.Del("obfuscation"))
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: "...)
	w.buf = jsonx.AppendEditedObject(w.buf, ev.Raw, edits...)
	w.buf = append(w.buf, "\n\n"...)
	w.seq++
}

// EventStream is the event stream OpenAI would have sent for the final
// response object final (which must be a valid response object):
// response.created and in_progress, each item's added/delta/done events,
// the terminal event its status names. The buffered path answers a
// streaming client with it, and scripted models (the demo's, the tests')
// stream with it; obfuscate adds the obfuscation padding OpenAI puts on
// delta events.
func EventStream(final []byte, obfuscate bool) []byte {
	// An event's data is one line: drop the whitespace between tokens (a
	// pretty-printing upstream would otherwise break the framing).
	doc := string(pretty.Ugly(final))
	root := gjson.Parse(doc)
	w := &Writer{buf: make([]byte, 0, 3*len(final)+1024), Obfuscate: obfuscate}

	pending := []jsonx.Edit{jsonx.Set("status", `"in_progress"`), jsonx.Set("output", "[]")}
	for _, k := range []string{"usage", "completed_at", "error", "incomplete_details"} {
		if root.Get(k).Exists() {
			pending = append(pending, jsonx.Set(k, "null"))
		}
	}
	start := string(jsonx.EditObject(doc, pending...))
	w.Event("response.created", Field{"response", start})
	w.Event("response.in_progress", Field{"response", start})

	idx := 0
	output := root.Get("output")
	if !output.IsArray() {
		output = gjson.Result{}
	}
	output.ForEach(func(_, it gjson.Result) bool {
		w.item(idx, it)
		idx++
		return true
	})

	terminal := "response.completed"
	switch root.Get("status").Str {
	case "incomplete":
		terminal = "response.incomplete"
	case "failed":
		terminal = "response.failed"
	}
	w.Event(terminal, Field{"response", doc})
	return w.buf
}

// item emits one output item's lifecycle.
func (w *Writer) item(idx int, it gjson.Result) {
	oi := Field{"output_index", strconv.Itoa(idx)}
	id := Field{"item_id", jsonx.Quote(it.Get("id").Str)}
	typ := it.Get("type").Str
	added := []jsonx.Edit{}
	if s := it.Get("status"); s.Type == gjson.String {
		added = append(added, jsonx.Set("status", `"in_progress"`))
	}
	switch typ {
	case "message":
		added = append(added, jsonx.Set("content", "[]"))
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		ci := 0
		it.Get("content").ForEach(func(_, part gjson.Result) bool {
			w.contentPart(ci, part, id, oi)
			ci++
			return true
		})

	case "code_interpreter_call":
		// The item is added before anything ran: its outputs are empty, an
		// empty array when the client asked for them (OpenAI's recordings
		// with include show [], those without show null). Images and logs
		// appear only in output_item.done and the terminal response: OpenAI
		// sends no event of their own.
		outputs := "null"
		if it.Get("outputs").IsArray() {
			outputs = "[]"
		}
		added = append(added, jsonx.Set("code", `""`), jsonx.Set("outputs", outputs))
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		w.Event("response.code_interpreter_call.in_progress", id, oi)
		code := it.Get("code").Str
		w.deltas("response.code_interpreter_call_code.delta", code, id, oi)
		w.Event("response.code_interpreter_call_code.done", Field{"code", jsonx.Quote(code)}, id, oi)
		w.Event("response.code_interpreter_call.interpreting", id, oi)
		w.Event("response.code_interpreter_call.completed", id, oi)

	case "shell_call":
		// OpenAI's hosted shell: the commands as the model writes them
		// (these events carry no item_id).
		added = append(added, jsonx.Set("action.commands", "[]"))
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		ci := 0
		it.Get("action.commands").ForEach(func(_, c gjson.Result) bool {
			k := Field{"command_index", strconv.Itoa(ci)}
			w.Event("response.shell_call_command.added", Field{"command", `""`}, k, oi)
			w.deltas("response.shell_call_command.delta", c.Str, k, oi)
			w.Event("response.shell_call_command.done", Field{"command", jsonx.Quote(c.Str)}, k, oi)
			ci++
			return true
		})

	case "shell_call_output":
		added = append(added, jsonx.Set("output", "[]"))
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		ci := 0
		it.Get("output").ForEach(func(_, o gjson.Result) bool {
			k := Field{"command_index", strconv.Itoa(ci)}
			delta := `{"stdout":` + jsonx.Quote(o.Get("stdout").Str) + `,"stderr":` + jsonx.Quote(o.Get("stderr").Str) + `}`
			w.Event("response.shell_call_output_content.delta", Field{"delta", delta}, id, k, oi)
			w.Event("response.shell_call_output_content.done", Field{"output", "[" + o.Raw + "]"}, id, k, oi)
			ci++
			return true
		})

	case "function_call", "custom_tool_call":
		field, prefix := "arguments", "response.function_call_arguments"
		if typ == "custom_tool_call" {
			field, prefix = "input", "response.custom_tool_call_input"
		}
		added = append(added, jsonx.Set(field, `""`))
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		text := it.Get(field).Str
		w.deltas(prefix+".delta", text, id, oi)
		w.Event(prefix+".done", Field{field, jsonx.Quote(text)}, id, oi)

	case "reasoning":
		added = append(added, jsonx.Set("summary", "[]"))
		if it.Get("content").Exists() {
			added = append(added, jsonx.Set("content", "[]"))
		}
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
		si := 0
		it.Get("summary").ForEach(func(_, part gjson.Result) bool {
			sk := Field{"summary_index", strconv.Itoa(si)}
			w.Event("response.reasoning_summary_part.added", id, oi, sk,
				Field{"part", string(jsonx.EditObject(part.Raw, jsonx.Set("text", `""`)))})
			text := part.Get("text").Str
			w.deltas("response.reasoning_summary_text.delta", text, id, oi, sk)
			w.Event("response.reasoning_summary_text.done", id, oi, sk, Field{"text", jsonx.Quote(text)})
			w.Event("response.reasoning_summary_part.done", id, oi, sk, Field{"part", part.Raw})
			si++
			return true
		})
		ci := 0
		it.Get("content").ForEach(func(_, part gjson.Result) bool {
			if part.Get("type").Str == "reasoning_text" {
				ck := Field{"content_index", strconv.Itoa(ci)}
				text := part.Get("text").Str
				w.deltas("response.reasoning_text.delta", text, id, oi, ck)
				w.Event("response.reasoning_text.done", id, oi, ck, Field{"text", jsonx.Quote(text)})
			}
			ci++
			return true
		})

	default:
		w.Event("response.output_item.added", Field{"item", string(jsonx.EditObject(it.Raw, added...))}, oi)
	}
	w.Event("response.output_item.done", Field{"item", it.Raw}, oi)
}

// contentPart emits one message content part's lifecycle.
func (w *Writer) contentPart(ci int, part gjson.Result, id, oi Field) {
	ck := Field{"content_index", strconv.Itoa(ci)}
	switch part.Get("type").Str {
	case "output_text":
		empty := []jsonx.Edit{jsonx.Set("text", `""`)}
		if part.Get("annotations").Exists() {
			empty = append(empty, jsonx.Set("annotations", "[]"))
		}
		w.Event("response.content_part.added", ck, id, oi, Field{"part", string(jsonx.EditObject(part.Raw, empty...))})
		text := part.Get("text").Str
		w.deltas("response.output_text.delta", text, ck, id, oi, Field{"logprobs", "[]"})
		ai := 0
		part.Get("annotations").ForEach(func(_, a gjson.Result) bool {
			w.Event("response.output_text.annotation.added", ck, id, oi,
				Field{"annotation", a.Raw}, Field{"annotation_index", strconv.Itoa(ai)})
			ai++
			return true
		})
		logprobs := "[]"
		if lp := part.Get("logprobs"); lp.IsArray() {
			logprobs = lp.Raw
		}
		w.Event("response.output_text.done", ck, id, oi, Field{"logprobs", logprobs}, Field{"text", jsonx.Quote(text)})
	case "refusal":
		w.Event("response.content_part.added", ck, id, oi, Field{"part", string(jsonx.EditObject(part.Raw, jsonx.Set("refusal", `""`)))})
		text := part.Get("refusal").Str
		w.deltas("response.refusal.delta", text, ck, id, oi)
		w.Event("response.refusal.done", ck, id, oi, Field{"refusal", jsonx.Quote(text)})
	default:
		w.Event("response.content_part.added", ck, id, oi, Field{"part", part.Raw})
	}
	w.Event("response.content_part.done", ck, id, oi, Field{"part", part.Raw})
}

// ErrorEvent is OpenAI's "error" event alone, the stream a streaming
// client gets when the loop fails after its response headers went out; an
// empty code or param is null.
func ErrorEvent(code, message, param string) []byte {
	w := &Writer{}
	c, p := "null", "null"
	if code != "" {
		c = jsonx.Quote(code)
	}
	if param != "" {
		p = jsonx.Quote(param)
	}
	w.Event("error", Field{"code", c}, Field{"message", jsonx.Quote(message)}, Field{"param", p})
	return w.buf
}

// Chunks splits text into token-sized deltas: a word with the spaces before
// it, at most maxChunk bytes, cut on rune boundaries.
func Chunks(text string) []string {
	const maxChunk = 16
	var out []string
	for len(text) > 0 {
		n := 0
		// leading spaces belong to the word after them
		for n < len(text) && n < maxChunk && text[n] == ' ' {
			n++
		}
		for n < len(text) && n < maxChunk {
			r, size := utf8.DecodeRuneInString(text[n:])
			if n > 0 && (unicode.IsSpace(r) || isPunct(r)) && !unicode.IsSpace(rune(text[n-1])) {
				break
			}
			if n+size > maxChunk && n > 0 {
				break
			}
			n += size
			if isPunct(r) || r == '\n' {
				break
			}
		}
		if n == 0 { // a single rune wider than maxChunk cannot happen; be safe
			_, n = utf8.DecodeRuneInString(text)
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// isPunct ends a chunk; '_' stays inside identifiers as tokenizers keep it.
func isPunct(r rune) bool { return r != '_' && unicode.IsPunct(r) }

const obfuscationAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// obfuscation pads a delta to a multiple of 16 characters with random
// letters, as OpenAI's stream obfuscation does, so event sizes do not reveal
// token lengths. It returns the JSON string (the letters need no escaping).
func obfuscation(delta string) string {
	n := 16 - utf8.RuneCountInString(delta)%16
	var b [18]byte
	b[0] = '"'
	for i := 1; i <= n; i++ {
		b[i] = obfuscationAlphabet[rand.IntN(len(obfuscationAlphabet))]
	}
	b[n+1] = '"'
	return string(b[:n+2])
}
