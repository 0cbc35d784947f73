package interceptor

import (
	"math/rand/v2"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"
)

// kv is one field of an event: a key and its raw JSON value.
type kv struct {
	k, v string
}

// sseWriter renders events as OpenAI sends them: "event: <type>" and
// "data: <json>" lines and a blank line, the JSON starting with "type" and
// the other fields in key order, sequence_number counting from 0.
type sseWriter struct {
	buf       []byte
	seq       int
	obfuscate bool
}

func (w *sseWriter) event(typ string, fs ...kv) {
	// Insertion sort: a handful of fields, and no allocation.
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].k < fs[j-1].k; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: {\"type\":"...)
	w.buf = appendString(w.buf, typ)
	seqDone := false
	for _, f := range fs {
		if !seqDone && f.k > "sequence_number" {
			w.buf = w.appendSeq(w.buf)
			seqDone = true
		}
		w.buf = append(w.buf, ',')
		w.buf = appendString(w.buf, f.k)
		w.buf = append(w.buf, ':')
		w.buf = append(w.buf, f.v...)
	}
	if !seqDone {
		w.buf = w.appendSeq(w.buf)
	}
	w.buf = append(w.buf, "}\n\n"...)
	w.seq++
}

func (w *sseWriter) appendSeq(dst []byte) []byte {
	dst = append(dst, `,"sequence_number":`...)
	return strconv.AppendInt(dst, int64(w.seq), 10)
}

// deltas emits one delta event per chunk of text; extra are the event's
// other fields (at most 4).
func (w *sseWriter) deltas(typ, text string, extra ...kv) {
	var arr [6]kv
	for _, chunk := range chunks(text) {
		fs := append(arr[:0], kv{"delta", jsonString(chunk)})
		fs = append(fs, extra...)
		if w.obfuscate {
			fs = append(fs, kv{"obfuscation", obfuscation(chunk)})
		}
		w.event(typ, fs...)
	}
}

// deltas1 emits one delta event of exactly text (the live path passes the
// model's own pieces on); extra are the event's other fields (at most 4).
func (w *sseWriter) deltas1(typ, text string, extra ...kv) {
	var arr [6]kv
	fs := append(arr[:0], kv{"delta", jsonString(text)})
	fs = append(fs, extra...)
	if w.obfuscate {
		fs = append(fs, kv{"obfuscation", obfuscation(text)})
	}
	w.event(typ, fs...)
}

// passthrough emits an upstream event as it came, keeping its fields and
// their order, with our sequence_number and, when outputIndex >= 0, the
// spliced output_index. Without obfuscation the upstream's padding goes.
func (w *sseWriter) passthrough(typ string, ev gjson.Result, outputIndex int) {
	var arr [3]edit
	edits := append(arr[:0], set("sequence_number", strconv.Itoa(w.seq)))
	if outputIndex >= 0 {
		edits = append(edits, set("output_index", strconv.Itoa(outputIndex)))
	}
	if !w.obfuscate {
		edits = append(edits, del("obfuscation"))
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: "...)
	w.buf = appendEditedObject(w.buf, ev.Raw, edits...)
	w.buf = append(w.buf, "\n\n"...)
	w.seq++
}

// synthesizeSSE turns a final response object into the event stream OpenAI
// would have sent for it. final must be a valid response object.
func synthesizeSSE(final []byte, obfuscate bool) []byte {
	// An event's data is one line: drop the whitespace between tokens (a
	// pretty-printing upstream would otherwise break the framing).
	doc := string(pretty.Ugly(final))
	root := gjson.Parse(doc)
	w := &sseWriter{buf: make([]byte, 0, 3*len(final)+1024), obfuscate: obfuscate}

	pending := []edit{set("status", `"in_progress"`), set("output", "[]")}
	for _, k := range []string{"usage", "completed_at", "error", "incomplete_details"} {
		if root.Get(k).Exists() {
			pending = append(pending, set(k, "null"))
		}
	}
	start := string(editObject(doc, pending...))
	w.event("response.created", kv{"response", start})
	w.event("response.in_progress", kv{"response", start})

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
	w.event(terminal, kv{"response", doc})
	return w.buf
}

// item emits one output item's lifecycle.
func (w *sseWriter) item(idx int, it gjson.Result) {
	oi := kv{"output_index", strconv.Itoa(idx)}
	id := kv{"item_id", jsonString(it.Get("id").Str)}
	typ := it.Get("type").Str
	added := []edit{}
	if s := it.Get("status"); s.Type == gjson.String {
		added = append(added, set("status", `"in_progress"`))
	}
	switch typ {
	case "message":
		added = append(added, set("content", "[]"))
		w.event("response.output_item.added", kv{"item", string(editObject(it.Raw, added...))}, oi)
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
		added = append(added, set("code", `""`), set("outputs", outputs))
		w.event("response.output_item.added", kv{"item", string(editObject(it.Raw, added...))}, oi)
		w.event("response.code_interpreter_call.in_progress", id, oi)
		code := it.Get("code").Str
		w.deltas("response.code_interpreter_call_code.delta", code, id, oi)
		w.event("response.code_interpreter_call_code.done", kv{"code", jsonString(code)}, id, oi)
		w.event("response.code_interpreter_call.interpreting", id, oi)
		w.event("response.code_interpreter_call.completed", id, oi)

	case "function_call", "custom_tool_call":
		field, prefix := "arguments", "response.function_call_arguments"
		if typ == "custom_tool_call" {
			field, prefix = "input", "response.custom_tool_call_input"
		}
		added = append(added, set(field, `""`))
		w.event("response.output_item.added", kv{"item", string(editObject(it.Raw, added...))}, oi)
		text := it.Get(field).Str
		w.deltas(prefix+".delta", text, id, oi)
		w.event(prefix+".done", kv{field, jsonString(text)}, id, oi)

	case "reasoning":
		added = append(added, set("summary", "[]"))
		if it.Get("content").Exists() {
			added = append(added, set("content", "[]"))
		}
		w.event("response.output_item.added", kv{"item", string(editObject(it.Raw, added...))}, oi)
		si := 0
		it.Get("summary").ForEach(func(_, part gjson.Result) bool {
			sk := kv{"summary_index", strconv.Itoa(si)}
			w.event("response.reasoning_summary_part.added", id, oi, sk,
				kv{"part", string(editObject(part.Raw, set("text", `""`)))})
			text := part.Get("text").Str
			w.deltas("response.reasoning_summary_text.delta", text, id, oi, sk)
			w.event("response.reasoning_summary_text.done", id, oi, sk, kv{"text", jsonString(text)})
			w.event("response.reasoning_summary_part.done", id, oi, sk, kv{"part", part.Raw})
			si++
			return true
		})
		ci := 0
		it.Get("content").ForEach(func(_, part gjson.Result) bool {
			if part.Get("type").Str == "reasoning_text" {
				ck := kv{"content_index", strconv.Itoa(ci)}
				text := part.Get("text").Str
				w.deltas("response.reasoning_text.delta", text, id, oi, ck)
				w.event("response.reasoning_text.done", id, oi, ck, kv{"text", jsonString(text)})
			}
			ci++
			return true
		})

	default:
		w.event("response.output_item.added", kv{"item", string(editObject(it.Raw, added...))}, oi)
	}
	w.event("response.output_item.done", kv{"item", it.Raw}, oi)
}

// contentPart emits one message content part's lifecycle.
func (w *sseWriter) contentPart(ci int, part gjson.Result, id, oi kv) {
	ck := kv{"content_index", strconv.Itoa(ci)}
	switch part.Get("type").Str {
	case "output_text":
		empty := []edit{set("text", `""`)}
		if part.Get("annotations").Exists() {
			empty = append(empty, set("annotations", "[]"))
		}
		w.event("response.content_part.added", ck, id, oi, kv{"part", string(editObject(part.Raw, empty...))})
		text := part.Get("text").Str
		w.deltas("response.output_text.delta", text, ck, id, oi, kv{"logprobs", "[]"})
		ai := 0
		part.Get("annotations").ForEach(func(_, a gjson.Result) bool {
			w.event("response.output_text.annotation.added", ck, id, oi,
				kv{"annotation", a.Raw}, kv{"annotation_index", strconv.Itoa(ai)})
			ai++
			return true
		})
		logprobs := "[]"
		if lp := part.Get("logprobs"); lp.IsArray() {
			logprobs = lp.Raw
		}
		w.event("response.output_text.done", ck, id, oi, kv{"logprobs", logprobs}, kv{"text", jsonString(text)})
	case "refusal":
		w.event("response.content_part.added", ck, id, oi, kv{"part", string(editObject(part.Raw, set("refusal", `""`)))})
		text := part.Get("refusal").Str
		w.deltas("response.refusal.delta", text, ck, id, oi)
		w.event("response.refusal.done", ck, id, oi, kv{"refusal", jsonString(text)})
	default:
		w.event("response.content_part.added", ck, id, oi, kv{"part", part.Raw})
	}
	w.event("response.content_part.done", ck, id, oi, kv{"part", part.Raw})
}

// errorEvent is the one-event stream a streaming client gets when the loop
// fails after its response headers went out.
func errorEvent(code, message, param string) []byte {
	w := &sseWriter{}
	c, p := "null", "null"
	if code != "" {
		c = jsonString(code)
	}
	if param != "" {
		p = jsonString(param)
	}
	w.event("error", kv{"code", c}, kv{"message", jsonString(message)}, kv{"param", p})
	return w.buf
}

// chunks splits text into token-sized deltas: a word with the spaces before
// it, at most maxChunk bytes, cut on rune boundaries.
func chunks(text string) []string {
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

// EventStream is the event stream OpenAI sends for the final response
// object final, as the synthetic stream writes it: response.created and
// in_progress, each item's added/delta/done events, response.completed.
// Scripted models (the demo's, the tests') stream with it; obfuscate adds
// the obfuscation padding OpenAI puts on delta events.
func EventStream(final []byte, obfuscate bool) []byte { return synthesizeSSE(final, obfuscate) }
