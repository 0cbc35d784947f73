package interceptor

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/tidwall/gjson"
)

// includeOutputs is the include value that makes OpenAI fill
// code_interpreter_call.outputs; without it outputs is null.
const includeOutputs = "code_interpreter_call.outputs"

// request is what RewriteRequest learned about one client request and what
// the loop and the splice need from it.
type request struct {
	intercepted  bool
	hasTool      bool // the request declares the code_interpreter tool (intercepted without it: history of ours)
	modified     bool
	clientStream bool
	background   bool   // "background": true: the filter's runner drives the loop, detached from the client
	clientBody   string // the request as the client sent it (what a queued response echoes)
	live         bool   // the client's stream is live (StreamLive): the upstream streams too
	upstream     []byte // body for the upstream (the client's own when !modified)

	clientTools      string // raw "tools" as the client sent it
	clientToolChoice string // raw "tool_choice", "" when absent
	clientPrevID     string // raw "previous_response_id", "" when absent
	conversation     bool   // the request continues a stored conversation
	storeOff         bool   // "store": false: the response is not kept
	clientInput      string // raw "input" of the body RewriteRequest read
	input            string // the upstream request's input as a raw JSON array
	toolChoice       string // raw tool_choice as sent upstream, "" when absent
	includeOutputs   bool
	obfuscate        bool  // add "obfuscation" to delta events, as OpenAI does by default
	maxCalls         int   // effective cap on code calls for this request
	memoryBytes      int64 // container memory_limit, 0 = operator default
	// network is the auto container's network_policy allowlist (nil:
	// none). Its secrets live only here and in the sandbox session's
	// proxy: clientTools holds them masked.
	network *egress.Policy
	// tools are the hosted tools the exchange serves, and where their
	// functions are in the upstream tools.
	tools          []served
	container      containerDecl
	containerParam string // e.g. "tools[0].container", for errors
}

// The tool markers: one of them ends every type name we must act on, as
// a client writes it without escapes — toolMarker the tool type
// "code_interpreter" (in tools and tool_choice), callMarker the item type
// "code_interpreter_call". A string ends at its quote, so a text that only
// mentions the tool ("you have no code_interpreter tool") shows neither.
// Their absence proves pass-through without parsing, which keeps the
// common case cheap. They start with '_', a rare byte in prose, so the scan
// skips ahead with the vectorised byte search instead of stopping at every
// 'c'.
var (
	toolMarker = []byte(`_interpreter"`)
	callMarker = []byte(`_interpreter_call"`)
	// The hosted shell's environments ("container_auto",
	// "container_reference"), also in its replayed shell_call items.
	autoMarker     = []byte(`_auto"`)
	shellRefMarker = []byte(`_reference"`)
)

// namesTool reports whether body holds toolMarker or callMarker.
func namesTool(body []byte) bool {
	for at := 0; ; at++ {
		i := bytes.IndexByte(body[at:], '_')
		if i < 0 {
			return false
		}
		at += i
		b := body[at:]
		if bytes.HasPrefix(b, toolMarker) || bytes.HasPrefix(b, callMarker) || bytes.HasPrefix(b, autoMarker) ||
			bytes.HasPrefix(b, shellRefMarker) && bytes.HasSuffix(body[:at], []byte(`"container`)) {
			return true
		}
	}
}

// escapesToolLetter reports whether body may spell a letter of
// "code_interpreter_call" (or its '_') with a JSON escape, which hides the
// markers ("code\u005finterpreter"): such bodies take the parsing path,
// where gjson decodes the escapes. Those letters are U+005F to U+0074, so
// the escape is \u005_, \u006_ or \u007_; the common ones (\u00e9 and the
// like from ASCII-only encoders, \u003c from HTML-safe ones) are not.
//
// The search anchors on '0', which prose and code rarely hold, where they
// hold backslashes (\n, \") every few bytes and a search anchored on '\\'
// stops at each. A body dense with zeros (numeric data) makes the
// anchored search stop too often; past a budget of misses it goes on with
// bytes.Index, which then switches to its own vectorised search.
func escapesToolLetter(body []byte) bool {
	letter := func(at []byte) bool { // at follows a `\u00`
		return len(at) > 0 && at[0] >= '5' && at[0] <= '7'
	}
	i, misses := 0, 0
	for {
		j := bytes.IndexByte(body[i:], '0')
		if j < 0 {
			return false
		}
		j += i // body[j] == '0': is it the first zero of a \u00?
		if j >= 2 && body[j-2] == '\\' && body[j-1] == 'u' && j+1 < len(body) && body[j+1] == '0' && letter(body[j+2:]) {
			return true
		}
		i = j + 1
		if misses++; misses > 16+i/64 {
			break
		}
	}
	// Every '0' before i was looked at, so an escape not yet seen starts at
	// i-2 or later.
	for b := body[max(i-2, 0):]; ; {
		j := bytes.Index(b, escapeMarker)
		if j < 0 {
			return false
		}
		if letter(b[j+len(escapeMarker):]) {
			return true
		}
		b = b[j+1:]
	}
}

// PassesThrough reports whether body is a request this server leaves to the
// model server whoever sends it: it names neither the tool nor a replayed
// call, spells none of their letters with an escape, and, when responses or
// conversations are kept, shows no marker of a stored one (mayUseHistory).
// NewExchange would answer it with a pass-through Exchange; the filter asks
// first so that a request that is not ours costs no caller identity and no
// Exchange. false only means NewExchange has to look.
func (i *Interceptor) PassesThrough(body []byte) bool {
	if escapesToolLetter(body) {
		return false
	}
	if i.responses != nil || i.conversations != nil {
		return !mayUseHistory(body) // which looks for the tool markers too
	}
	return !namesTool(body)
}

// escapeMarker starts every JSON escape of an ASCII character.
var escapeMarker = []byte(`\u00`)

// RewriteRequest inspects a client's /v1/responses request body. Without a
// native code_interpreter tool (and without replayed code_interpreter_call
// items) the Exchange is a pass-through: !Intercepted() && !Modified(), found
// without parsing the whole body. Otherwise it validates the tool and returns
// the upstream body: the tool replaced by a function tool, tool_choice and
// replayed history rewritten, stream forced to false. A refused request gives
// an *apierror.Error (HTTP 400 with param naming the field, or 413) and no Exchange.
func (i *Interceptor) RewriteRequest(body []byte) (*Exchange, error) {
	return i.rewrite(body, false)
}

// rewrite is RewriteRequest; own says the request continues a response or
// a conversation of ours (resolveHistory), so its answer is this server's
// to make and keep — intercepted with or without the tool.
func (i *Interceptor) rewrite(body []byte, own bool) (*Exchange, error) {
	pass := &Exchange{ic: i, req: request{upstream: body}}
	escaped := escapesToolLetter(body)
	if !own && !escaped && !namesTool(body) {
		return pass, nil
	}
	doc := string(body)
	if !gjson.Parse(doc).IsObject() {
		return pass, nil
	}
	// One tolerant walk of the top level finds what matters; the full
	// validation is paid only by requests we go on to change.
	root := jsonx.ParseObject(doc)
	tools := root.Get("tools")
	hasTool := i.hasNativeTool(tools)
	input := root.Get("input")
	if !hasTool && !own && !mayReplayCalls(input, escaped) {
		return pass, nil
	}
	if !gjson.Valid(doc) {
		// The upstream owns JSON syntax errors, unless the body (as far as a
		// tolerant reader can tell) asks for our tool.
		if hasTool {
			return nil, &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Code: "invalid_json",
				Message: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"}
		}
		return pass, nil
	}
	newInput, changed := i.rewriteInput(input, escaped)
	if !hasTool && !own && !changed {
		return pass, nil
	}
	if i.cfg.MaxBodyBytes > 0 && len(body) > i.cfg.MaxBodyBytes {
		return nil, &apierror.Error{Status: http.StatusRequestEntityTooLarge, Type: apierror.TypeInvalidRequest, Code: "request_too_large",
			Message: "The request body is " + strconv.Itoa(len(body)) + " bytes; this server accepts at most " + strconv.Itoa(i.cfg.MaxBodyBytes) + "."}
	}
	if k := root.Dup; k != "" {
		return nil, apierror.Invalid(k, "duplicate_parameter", "Duplicate parameter: '%s'. Each parameter may appear only once.", k)
	}
	r := request{modified: true, obfuscate: true}
	var edits []jsonx.Edit
	if hasTool || own {
		r.intercepted, r.hasTool, r.clientBody = true, hasTool, doc
		te, err := i.rewriteTools(&r, root, tools)
		if err != nil {
			return nil, err
		}
		edits = append(edits, te...)
	}
	if r.hasTool && i.containers != nil {
		r.container.reuse = i.replayedContainers(input)
		in := input
		if changed {
			in = gjson.Parse(newInput)
		}
		files, noted, c, err := inputFiles(in, i.cfg.InputFiles == InputFilesNote)
		if err != nil {
			return nil, err
		}
		r.container.inputs = files
		if c {
			newInput, changed = noted, true
		}
	}
	switch {
	case changed:
		edits = append(edits, jsonx.Set("input", newInput))
		r.input = newInput
	case input.IsArray():
		r.input = input.Raw
	case input.Type == gjson.String:
		r.input = "[" + string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("type", `"message"`), jsonx.Set("role", `"user"`), jsonx.Set("content", input.Raw))) + "]"
	case !input.Exists() || input.Type == gjson.Null:
		r.input = "[]"
	default:
		return nil, apierror.Invalid("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items.")
	}
	// Without our tool only replayed history was rewritten, and the response
	// is the upstream's own.
	r.upstream = jsonx.AppendEditedFields(make([]byte, 0, len(doc)+1024), doc, root.Fields, edits...)
	return &Exchange{ic: i, req: r}, nil
}
