package interceptor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
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
	network        *egress.Policy
	fnIndex        int // our function tool's index in the upstream tools
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
)

// namesTool reports whether body holds toolMarker or callMarker.
func namesTool(body []byte) bool {
	for b := body; ; b = b[1:] {
		i := bytes.IndexByte(b, '_')
		if i < 0 {
			return false
		}
		b = b[i:]
		if bytes.HasPrefix(b, toolMarker) || bytes.HasPrefix(b, callMarker) {
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
	hasTool := hasNativeTool(tools)
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
		r.intercepted, r.hasTool = true, hasTool
		te, err := i.rewriteTools(&r, root, tools)
		if err != nil {
			return nil, err
		}
		edits = append(edits, te...)
	}
	if r.hasTool && i.containers != nil {
		r.container.reuse = replayedContainers(input)
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
	r.upstream = jsonx.AppendEditedFields(make([]byte, 0, len(doc)+len(i.fn.json)+64), doc, root.Fields, edits...)
	return &Exchange{ic: i, req: r}, nil
}

// mayReplayCalls is a quick test that input could hold code_interpreter_call
// items; escaped is escapesToolLetter of the whole body. The search starts
// at '_', a rare byte, for the same reason as the markers'.
func mayReplayCalls(input gjson.Result, escaped bool) bool {
	return input.IsArray() && (escaped || strings.Contains(input.Raw, string(callMarker)))
}

// hasNativeTool reports whether tools (the request's "tools") declares the
// native code_interpreter tool.
func hasNativeTool(tools gjson.Result) bool {
	if !tools.IsArray() {
		return false
	}
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		if t.IsObject() && t.Get("type").Str == "code_interpreter" {
			found = true
			return false
		}
		return true
	})
	return found
}

// rewriteTools validates the request fields that matter once our tool is
// present and returns the edits for the upstream body.
func (i *Interceptor) rewriteTools(r *request, root *jsonx.Object, tools gjson.Result) ([]jsonx.Edit, error) {
	fn := i.cfg.FunctionName
	if bg := root.Get("background"); bg.Type == gjson.True {
		return nil, apierror.Invalid("background", "unsupported_parameter", "Background mode is not supported together with the code_interpreter tool on this server.")
	}
	r.clientTools = tools.Raw
	defer func() {
		if r.network != nil && len(r.network.Secrets) > 0 {
			// What the response echoes and the store keeps.
			r.clientTools = netpolicy.RedactTools(r.clientTools)
		}
	}()
	var out []string
	var apiErr *apierror.Error
	n, ciIndex := 0, -1
	tools.ForEach(func(_, t gjson.Result) bool {
		idx := n
		n++
		param := "tools[" + strconv.Itoa(idx) + "]"
		if t.IsObject() {
			if k := jsonx.DuplicateKey(t.Raw); k != "" {
				apiErr = apierror.Invalid(param+"."+k, "duplicate_parameter", "Duplicate parameter: '%s.%s'.", param, k)
				return false
			}
		}
		typ := t.Get("type").Str
		switch {
		case typ == "code_interpreter":
			if ciIndex >= 0 {
				apiErr = apierror.Invalid(param, "duplicate_tool", "Only one code_interpreter tool may be given; tools[%d] is one already.", ciIndex)
				return false
			}
			ciIndex = idx
			r.fnIndex = len(out)
			mem, err := i.checkNativeTool(r, param, t)
			if err != nil {
				apiErr = err
				return false
			}
			r.memoryBytes = mem
			if r.network != nil {
				out = append(out, newFunctionTool(fn, i.provider.Environment(), r.network).json)
			} else {
				out = append(out, i.fn.json)
			}
		case (typ == "function" || typ == "custom") && t.Get("name").Str == fn:
			apiErr = apierror.Invalid(param+".name", "tool_name_conflict",
				"A %s tool named '%s' conflicts with the code_interpreter tool, which this server provides under that name. Rename your tool.", typ, fn)
			return false
		default:
			out = append(out, t.Raw)
		}
		return true
	})
	if apiErr != nil {
		return nil, apiErr
	}
	var edits []jsonx.Edit
	if tools.Exists() {
		edits = append(edits, jsonx.Set("tools", string(jsonx.AppendArray(nil, out))))
	}

	// tool_choice: forcing the native tool becomes forcing our function.
	if tc := root.Get("tool_choice"); tc.Exists() {
		r.clientToolChoice = tc.Raw
		newTC, err := i.rewriteToolChoice(tc)
		if err != nil {
			return nil, err
		}
		r.toolChoice = newTC
		if newTC != tc.Raw {
			edits = append(edits, jsonx.Set("tool_choice", newTC))
		}
	}

	if pr := root.Get("previous_response_id"); pr.Exists() {
		r.clientPrevID = pr.Raw
	}
	r.storeOff = root.Get("store").Type == gjson.False
	r.clientInput = root.Get("input").Raw
	if c := root.Get("conversation"); c.Exists() && c.Type != gjson.Null {
		r.conversation = true
	}

	// stream: the loop needs whole responses; the client still gets SSE.
	if s := root.Get("stream"); s.Exists() {
		switch s.Type {
		case gjson.True:
			r.clientStream = true
			edits = append(edits, jsonx.Set("stream", "false"))
		case gjson.False, gjson.Null:
		default:
			return nil, apierror.Invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean, but got %s instead.", jsonx.TypeName(s))
		}
	}
	if so := root.Get("stream_options"); so.Exists() {
		if r.clientStream {
			if ob := so.Get("include_obfuscation"); ob.Type == gjson.False {
				r.obfuscate = false
			}
		}
		edits = append(edits, jsonx.Del("stream_options"))
	}

	// include: code_interpreter_call.outputs is ours to honour; the upstream
	// does not know it.
	if inc := root.Get("include"); inc.Exists() && inc.Type != gjson.Null {
		if !inc.IsArray() {
			return nil, apierror.Invalid("include", "invalid_type", "Invalid type for 'include': expected an array of strings, but got %s instead.", jsonx.TypeName(inc))
		}
		var kept []string
		inc.ForEach(func(_, v gjson.Result) bool {
			if v.Type == gjson.String && v.Str == includeOutputs {
				r.includeOutputs = true
			} else {
				kept = append(kept, v.Raw)
			}
			return true
		})
		if r.includeOutputs {
			edits = append(edits, jsonx.Set("include", string(jsonx.AppendArray(nil, kept))))
		}
	}

	// max_tool_calls can only lower the operator's cap.
	r.maxCalls = i.cfg.MaxToolCalls
	if mt := root.Get("max_tool_calls"); mt.Exists() && mt.Type != gjson.Null {
		v, err := strconv.ParseInt(mt.Raw, 10, 64)
		if mt.Type != gjson.Number || err != nil || v < 0 {
			return nil, apierror.Invalid("max_tool_calls", "invalid_value", "Invalid 'max_tool_calls': expected a non-negative integer, but got %s.", mt.Raw)
		}
		if v < int64(r.maxCalls) {
			r.maxCalls = int(v)
		}
	}
	return edits, nil
}

// checkNativeTool validates one native code_interpreter declaration and
// returns the memory it asks for (0 = operator default).
func (i *Interceptor) checkNativeTool(r *request, param string, t gjson.Result) (int64, *apierror.Error) {
	var mem int64
	var apiErr *apierror.Error
	hasContainer := false
	t.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
		case "allowed_callers":
			// The model calls the tool directly; nothing else can here.
			ok := v.Type == gjson.Null || v.IsArray()
			v.ForEach(func(_, c gjson.Result) bool {
				ok = ok && c.Str == "direct"
				return ok
			})
			if !ok {
				apiErr = apierror.Invalid(param+".allowed_callers", "unsupported_parameter", "Only direct calls are supported: '%s.allowed_callers' may only list \"direct\".", param)
			}
		case "container":
			hasContainer = true
			r.containerParam = param + ".container"
			mem, apiErr = i.checkContainer(r, param+".container", v)
		default:
			apiErr = apierror.Invalid(param+"."+k.Str, "unknown_parameter", "Unknown parameter: '%s.%s'.", param, k.Str)
		}
		return apiErr == nil
	})
	if apiErr != nil {
		return 0, apiErr
	}
	if !hasContainer {
		return 0, apierror.Invalid(param+".container", "missing_required_parameter", "Missing required parameter: '%s.container'.", param)
	}
	return mem, nil
}

func (i *Interceptor) checkContainer(r *request, param string, c gjson.Result) (int64, *apierror.Error) {
	switch {
	case c.Type == gjson.String && i.containers != nil:
		r.container.id = c.Str
		return 0, checkContainerID(param, c.Str)
	case c.Type == gjson.String:
		return 0, apierror.Invalid(param, "container_not_found",
			"Container '%s' not found. This server starts a fresh container for every response; use {\"type\": \"auto\"}.", c.Str)
	case !c.IsObject():
		return 0, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an object or a container id, but got %s instead.", param, jsonx.TypeName(c))
	}
	if k := jsonx.DuplicateKey(c.Raw); k != "" {
		return 0, apierror.Invalid(param+"."+k, "duplicate_parameter", "Duplicate parameter: '%s.%s'.", param, k)
	}
	var mem int64
	var apiErr *apierror.Error
	hasType := false
	c.ForEach(func(k, v gjson.Result) bool {
		p := param + "." + k.Str
		switch k.Str {
		case "type":
			hasType = true
			if v.Type != gjson.String || v.Str != "auto" {
				apiErr = apierror.Invalid(p, "invalid_value", "Invalid value for '%s': only 'auto' is supported.", p)
			}
		case "memory_limit":
			if v.Type == gjson.Null {
				return true
			}
			n, ok := parseMemory(v)
			switch {
			case !ok:
				apiErr = apierror.Invalid(p, "invalid_value", "Invalid value for '%s': expected a size such as \"1g\", but got %s.", p, v.Raw)
			case n > i.cfg.MaxMemoryBytes:
				apiErr = apierror.Invalid(p, "invalid_value", "Invalid value for '%s': %s is above this server's maximum of %s.", p, v.Str, memlimit.Format(i.cfg.MaxMemoryBytes))
			default:
				mem = n
			}
		case "file_ids":
			switch {
			case i.containers != nil:
				r.container.fileIDs, apiErr = checkFileIDs(p, v)
			case v.Type == gjson.Null:
			case !v.IsArray():
				apiErr = apierror.Invalid(p, "invalid_type", "Invalid type for '%s': expected an array of file ids.", p)
			case len(v.Array()) > 0:
				apiErr = apierror.Invalid(p, "unsupported_parameter", "Files are not supported by this server's code_interpreter: '%s' must be empty.", p)
			}
		case "network_policy":
			// Disabled (or null) keeps the sandbox sealed; an allowlist
			// needs a provider with sockets and the operator's bound.
			r.network, apiErr = i.network.Parse(v, p)
		default:
			apiErr = apierror.Invalid(p, "unknown_parameter", "Unknown parameter: '%s'.", p)
		}
		return apiErr == nil
	})
	if apiErr != nil {
		return 0, apiErr
	}
	if !hasType {
		return 0, apierror.Invalid(param+".type", "missing_required_parameter", "Missing required parameter: '%s.type'.", param)
	}
	return mem, nil
}

// parseMemory reads a memory_limit value (see memlimit.Parse).
func parseMemory(v gjson.Result) (int64, bool) {
	if v.Type != gjson.String {
		return 0, false
	}
	return memlimit.Parse(v.Str)
}

// rewriteToolChoice maps a tool_choice naming the native tool to our
// function; anything else is returned unchanged.
func (i *Interceptor) rewriteToolChoice(tc gjson.Result) (string, *apierror.Error) {
	if !tc.IsObject() {
		return tc.Raw, nil
	}
	if k := jsonx.DuplicateKey(tc.Raw); k != "" {
		return "", apierror.Invalid("tool_choice."+k, "duplicate_parameter", "Duplicate parameter: 'tool_choice.%s'.", k)
	}
	fnChoice := string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("type", `"function"`), jsonx.Set("name", jsonx.Quote(i.cfg.FunctionName))))
	switch tc.Get("type").Str {
	case "code_interpreter":
		return fnChoice, nil
	case "allowed_tools":
		list := tc.Get("tools")
		if !list.IsArray() {
			return tc.Raw, nil
		}
		var out []string
		changed := false
		list.ForEach(func(_, t gjson.Result) bool {
			if t.IsObject() && t.Get("type").Str == "code_interpreter" {
				out = append(out, fnChoice)
				changed = true
			} else {
				out = append(out, t.Raw)
			}
			return true
		})
		if !changed {
			return tc.Raw, nil
		}
		return string(jsonx.EditObject(tc.Raw, jsonx.Set("tools", string(jsonx.AppendArray(nil, out))))), nil
	}
	return tc.Raw, nil
}

// rewriteInput turns replayed code_interpreter_call items into the
// function_call + function_call_output pair the upstream model understands.
// Items it cannot represent (outputs of a kind it does not know) are left
// intact.
func (i *Interceptor) rewriteInput(input gjson.Result, escaped bool) (string, bool) {
	if !mayReplayCalls(input, escaped) {
		return input.Raw, false
	}
	var out []string
	changed := false
	input.ForEach(func(_, it gjson.Result) bool {
		if !it.IsObject() || it.Get("type").Str != "code_interpreter_call" || !replayable(it.Get("outputs")) {
			out = append(out, it.Raw)
			return true
		}
		changed = true
		callID := replayCallID(it)
		code := it.Get("code").Str
		args := string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("code", jsonx.Quote(code))))
		out = append(out, string(jsonx.AppendEditedObject(nil, `{}`,
			jsonx.Set("type", `"function_call"`),
			jsonx.Set("call_id", jsonx.Quote(callID)),
			jsonx.Set("name", jsonx.Quote(i.cfg.FunctionName)),
			jsonx.Set("arguments", jsonx.Quote(args)),
		)))
		out = append(out, string(jsonx.AppendEditedObject(nil, `{}`,
			jsonx.Set("type", `"function_call_output"`),
			jsonx.Set("call_id", jsonx.Quote(callID)),
			jsonx.Set("output", jsonx.Quote(replayOutput(it))),
		)))
		return true
	})
	if !changed {
		return input.Raw, false
	}
	return string(jsonx.AppendArray(nil, out)), true
}

// replayable reports whether outputs (of a code_interpreter_call) is null,
// absent, or holds only logs and image entries: what a text-only model can
// be told (an image as a line saying it was shown, never its bytes). Our own
// responses carry images, and a client replays them as it got them.
func replayable(outputs gjson.Result) bool {
	if !outputs.Exists() || outputs.Type == gjson.Null {
		return true
	}
	if !outputs.IsArray() {
		return false
	}
	ok := true
	outputs.ForEach(func(_, o gjson.Result) bool {
		typ := o.Get("type").Str
		ok = o.IsObject() && (typ == "logs" || typ == "image")
		return ok
	})
	return ok
}

// replayCallID derives a call id from the item's id, so every replay of the
// same item yields the same function_call/function_call_output pair.
func replayCallID(it gjson.Result) string {
	seed := it.Get("id").Str
	if seed == "" {
		seed = it.Raw
	}
	sum := sha256.Sum256([]byte(seed))
	return "call_" + hex.EncodeToString(sum[:12])
}

// replayOutput is what the model is told a replayed call produced.
func replayOutput(it gjson.Result) string {
	status := it.Get("status").Str
	if status == "" {
		status = "completed"
	}
	var b strings.Builder
	b.WriteString("status: ")
	b.WriteString(status)
	b.WriteByte('\n')
	outputs := it.Get("outputs")
	if !outputs.IsArray() {
		b.WriteString("output: (not recorded in the conversation history)\n")
		return b.String()
	}
	b.WriteString("output:\n")
	n := 0
	var types []string
	outputs.ForEach(func(_, o gjson.Result) bool {
		if o.Get("type").Str == "image" {
			n++
			if mt, ok := dataURLMediaType(o.Get("url").Str); ok && !slices.Contains(types, mt) {
				types = append(types, mt)
			}
			return true
		}
		b.WriteString(o.Get("logs").Str)
		return true
	})
	if n > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(imagesLine(n, types, true)) // the client had the outputs: it replays them
	return b.String()
}
