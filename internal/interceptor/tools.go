package interceptor

import (
	"strconv"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/tidwall/gjson"
)

// hasNativeTool reports whether tools (the request's "tools") declares a
// hosted tool this server serves.
func (i *Interceptor) hasNativeTool(tools gjson.Result) bool {
	if !tools.IsArray() {
		return false
	}
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		found = i.declaredTool(t) != nil
		return !found
	})
	return found
}

// rewriteTools validates the request fields that matter once our tool is
// present and returns the edits for the upstream body.
func (i *Interceptor) rewriteTools(r *request, root *jsonx.Object, tools gjson.Result) ([]jsonx.Edit, error) {
	var edits []jsonx.Edit
	if bg := root.Get("background"); bg.Exists() {
		switch bg.Type {
		case gjson.True:
			// The server runs the loop itself (the filter's background
			// runner) and the record is what the client polls: it must be
			// kept, as OpenAI requires.
			if root.Get("store").Type == gjson.False {
				return nil, apierror.Invalid("background", "invalid_value", "Background mode requires 'store' to be true; 'store': false cannot be used with 'background': true.")
			}
			if i.responses == nil {
				return nil, apierror.Invalid("background", "unsupported_parameter", "Background mode needs this server's response store, which is not configured.")
			}
			r.background = true
			edits = append(edits, jsonx.Del("background"))
		case gjson.False, gjson.Null:
		default:
			return nil, apierror.Invalid("background", "invalid_type", "Invalid type for 'background': expected a boolean, but got %s instead.", jsonx.TypeName(bg))
		}
	}
	r.clientTools = tools.Raw
	defer func() {
		if r.network != nil && len(r.network.Secrets) > 0 {
			// What the response echoes and the store keeps.
			r.clientTools = netpolicy.RedactTools(r.clientTools)
		}
	}()
	// The code_interpreter's function is served on every intercepted
	// exchange (a continuation of ours may be answered with its calls);
	// the other tools' where they are declared.
	r.tools = []served{{t: i.ci, at: -1}}
	declared := map[string]int{} // tool name → its index in tools
	tools.ForEach(func(_, t gjson.Result) bool {
		if tl := i.declaredTool(t); tl != nil && tl != i.ci {
			r.tools = append(r.tools, served{t: tl, at: -1})
		}
		return true
	})
	var out []string
	var apiErr *apierror.Error
	n := 0
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
		if tl := i.declaredTool(t); tl != nil {
			if k, dup := declared[tl.Name()]; dup {
				apiErr = apierror.Invalid(param, "duplicate_tool", "Only one %s tool may be given; tools[%d] is one already.", tl.Name(), k)
				return false
			}
			declared[tl.Name()] = idx
			if apiErr = tl.check(i, r, param, t); apiErr != nil {
				return false
			}
			for k := range r.tools {
				if r.tools[k].t == tl {
					r.tools[k].at = len(out)
				}
			}
			out = append(out, "") // rendered once the network policy is known
			return true
		}
		if tl := r.toolFor(t.Get("name").Str); (typ == "function" || typ == "custom") && tl != nil {
			apiErr = apierror.Invalid(param+".name", "tool_name_conflict",
				"A %s tool named '%s' conflicts with the %s tool, which this server provides under that name. Rename your tool.", typ, tl.FunctionName(), tl.Name())
			return false
		}
		out = append(out, t.Raw)
		return true
	})
	if apiErr != nil {
		return nil, apiErr
	}
	for _, s := range r.tools {
		if s.at >= 0 {
			out[s.at] = i.function(s.t, r.network)
		}
	}
	if tools.Exists() {
		edits = append(edits, jsonx.Set("tools", string(jsonx.AppendArray(nil, out))))
	}

	// tool_choice: forcing the native tool becomes forcing our function.
	if tc := root.Get("tool_choice"); tc.Exists() {
		r.clientToolChoice = tc.Raw
		newTC, err := r.rewriteToolChoice(tc)
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

// checkContainer validates a container declaration of a tool at param:
// an id (both tools must then name one container) or an auto container,
// whose memory it returns.
func (i *Interceptor) checkContainer(r *request, param string, c gjson.Result) (int64, *apierror.Error) {
	switch {
	case c.Type == gjson.String && i.containers != nil:
		if err := checkContainerID(param, c.Str); err != nil {
			return 0, err
		}
		if err := r.container.name(param, c.Str); err != nil {
			return 0, err
		}
		return 0, nil
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
				// Both tools' file_ids go into their one container.
				var ids []string
				ids, apiErr = checkFileIDs(p, v)
				r.container.fileIDs = append(r.container.fileIDs, ids...)
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

// rewriteToolChoice maps a tool_choice naming a served tool ({"type":
// "code_interpreter"}, {"type": "shell"}, also in allowed_tools) to its
// function; anything else is returned unchanged.
func (r *request) rewriteToolChoice(tc gjson.Result) (string, *apierror.Error) {
	if !tc.IsObject() {
		return tc.Raw, nil
	}
	if k := jsonx.DuplicateKey(tc.Raw); k != "" {
		return "", apierror.Invalid("tool_choice."+k, "duplicate_parameter", "Duplicate parameter: 'tool_choice.%s'.", k)
	}
	choice := func(t gjson.Result) (string, bool) {
		for _, s := range r.tools {
			if t.IsObject() && t.Get("type").Str == s.t.Name() {
				return string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("type", `"function"`), jsonx.Set("name", jsonx.Quote(s.t.FunctionName())))), true
			}
		}
		return "", false
	}
	if fc, ok := choice(tc); ok {
		return fc, nil
	}
	if tc.Get("type").Str != "allowed_tools" || !tc.Get("tools").IsArray() {
		return tc.Raw, nil
	}
	var out []string
	changed := false
	tc.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if fc, ok := choice(t); ok {
			out = append(out, fc)
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

// function is t's function tool for the upstream, described for the
// request's network policy (pre-rendered without one).
func (i *Interceptor) function(t tool, pol *egress.Policy) string {
	if pol == nil {
		return i.plain[t.Name()]
	}
	return t.Function(i.provider.Environment(), pol)
}
