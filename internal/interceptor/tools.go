package interceptor

import (
	"strconv"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/shelltool"
	"github.com/tidwall/gjson"
)

// hasNativeTool reports whether tools (the request's "tools") declares the
// native code_interpreter tool.
func hasNativeTool(tools gjson.Result) bool {
	if !tools.IsArray() {
		return false
	}
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		if t.IsObject() && t.Get("type").Str == "code_interpreter" || shelltool.Hosted(t) {
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
	var out []string
	var apiErr *apierror.Error
	n, ciIndex, shellIndex, shellAt := 0, -1, -1, -1
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
		case shelltool.Hosted(t):
			if shellIndex >= 0 {
				apiErr = apierror.Invalid(param, "duplicate_tool", "Only one shell tool with a container environment may be given; tools[%d] is one already.", shellIndex)
				return false
			}
			shellIndex = idx
			if apiErr = i.checkShell(r, param, t); apiErr != nil {
				return false
			}
			shellAt = len(out)
			out = append(out, "") // rendered once the network policy is known
		case (typ == "function" || typ == "custom") && (t.Get("name").Str == shelltool.FunctionName && hasHostedShell(tools)):
			apiErr = apierror.Invalid(param+".name", "tool_name_conflict",
				"A %s tool named '%s' conflicts with the hosted shell tool, which this server provides under that name. Rename your tool.", typ, shelltool.FunctionName)
			return false
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
	if shellAt >= 0 {
		net := ""
		if r.network != nil {
			net = networkDescription(r.network)
		}
		out[shellAt] = shelltool.Function(shelltool.Description(net))
	}
	if tools.Exists() {
		edits = append(edits, jsonx.Set("tools", string(jsonx.AppendArray(nil, out))))
	}

	// tool_choice: forcing the native tool becomes forcing our function.
	if tc := root.Get("tool_choice"); tc.Exists() {
		r.clientToolChoice = tc.Raw
		newTC, err := i.rewriteToolChoice(tc, r.shell)
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

// rewriteToolChoice maps a tool_choice naming the native tool to our
// function; anything else is returned unchanged.
func (i *Interceptor) rewriteToolChoice(tc gjson.Result, shell bool) (string, *apierror.Error) {
	if !tc.IsObject() {
		return tc.Raw, nil
	}
	if k := jsonx.DuplicateKey(tc.Raw); k != "" {
		return "", apierror.Invalid("tool_choice."+k, "duplicate_parameter", "Duplicate parameter: 'tool_choice.%s'.", k)
	}
	fnChoice := string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("type", `"function"`), jsonx.Set("name", jsonx.Quote(i.cfg.FunctionName))))
	shellChoice := `{"type":"function","name":` + jsonx.Quote(shelltool.FunctionName) + `}`
	switch tc.Get("type").Str {
	case "code_interpreter":
		return fnChoice, nil
	case "shell":
		if shell {
			return shellChoice, nil
		}
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
			} else if shell && t.IsObject() && t.Get("type").Str == "shell" {
				out = append(out, shellChoice)
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

// hasHostedShell reports whether tools declares a hosted shell.
func hasHostedShell(tools gjson.Result) bool {
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		found = shelltool.Hosted(t)
		return !found
	})
	return found
}

// checkShell validates a hosted shell declaration: a provider without a
// shell refuses it (never a silent pass-through), a container_reference
// names the response's container (the same one a code_interpreter names),
// a container_auto is read as a code_interpreter's auto container — one
// container for both tools.
func (i *Interceptor) checkShell(r *request, param string, t gjson.Result) *apierror.Error {
	env := i.provider.Environment()
	if !env.Shell {
		return apierror.Invalid(param, "unsupported_tool",
			"The shell tool with a container environment is not available on this server: its sandbox (%s) has no shell. Use the code_interpreter tool, or an environment of type 'local'.", env.Provider)
	}
	d, apiErr := shelltool.Check(param, t)
	if apiErr != nil {
		return apiErr
	}
	r.shell = true
	p := param + ".environment"
	if d.Reference != "" {
		if i.containers == nil {
			return apierror.Invalid(p+".container_id", "container_not_found",
				"Container '%s' not found. This server starts a fresh container for every response; use {\"type\": \"container_auto\"}.", d.Reference)
		}
		if err := checkContainerID(p+".container_id", d.Reference); err != nil {
			return err
		}
		if r.container.id != "" && r.container.id != d.Reference {
			return apierror.Invalid(p+".container_id", "invalid_value",
				"The shell and the code_interpreter must use one container: '%s' names %s, another tool %s.", p+".container_id", d.Reference, r.container.id)
		}
		r.container.id = d.Reference
		if r.containerParam == "" {
			r.containerParam = p
		}
		return nil
	}
	mem, apiErr := i.checkContainer(r, p, d.Container)
	if apiErr != nil {
		return apiErr
	}
	r.memoryBytes = max(r.memoryBytes, mem)
	if r.containerParam == "" {
		r.containerParam = p
	}
	if len(d.Skills) > 0 && i.containers == nil {
		return apierror.Invalid(p+".skills", "unsupported_parameter", "Skills need the server's containers, which this server does not keep: '%s.skills' must be empty.", p)
	}
	r.container.skills, r.container.skillsParam = d.Skills, p+".skills"
	return nil
}
