package interceptor

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/shelltool"
)

// This file reads one upstream answer as a round: its output items and the
// calls of our function among them, each with the code it carries.

// call is one call of our function found in a model turn.
type call struct {
	index  int    // position in the round's output
	callID string // the model's call_id, echoed in function_call_output
	code   string
	args   string // the raw arguments string
	ciID   string // id of the code_interpreter_call the client sees

	argErr string // non-empty: the arguments were unusable; nothing ran
	notRun string // non-empty: a limit kept the call from running
	res    sandbox.Result

	// In a container (Containers): the run started a fresh interpreter in
	// a container that existed before, the files it wrote, its images as
	// container files.
	reset bool
	// behind: the interpreter was restored from a checkpoint older than
	// the container's last runs (containerapi.RunResult.Behind).
	behind  bool
	changed []containerapi.File
	images  []containerapi.File

	// shell is set for a call of the hosted shell (shelltool): its
	// commands run by Container.Shell and it is shown as a shell_call and
	// a shell_call_output.
	shell *shellCall
}

// shellCall is what a shell call adds to a call.
type shellCall struct {
	action shelltool.Action
	outID  string // the shell_call_output's id (ciID is the shell_call's)
}

// round is one upstream response and the calls it asked for.
type round struct {
	doc         string // the response body
	root        gjson.Result
	items       []gjson.Result // output items
	calls       []*call        // our calls, in output order
	callAt      map[int]*call  // output index → call
	status      string
	id          string
	stored      bool
	clientCalls bool   // the turn also calls tools the client must run itself
	filesNote   string // after the calls ran: the container's files, for the model
}

// clientCallTypes are output items the client, not the server, must answer;
// a turn containing one ends the loop (as OpenAI returns it to the client).
var clientCallTypes = map[string]bool{
	"function_call": true, "custom_tool_call": true, "computer_call": true,
	"local_shell_call": true, "shell_call": true, "apply_patch_call": true,
	"mcp_approval_request": true,
}

// errBadUpstream marks an upstream 2xx answer we cannot use.
var errBadUpstream = errors.New("upstream response is not a Responses-API response object")

func (i *Interceptor) parseRound(body []byte, shellCalls bool) (*round, error) {
	doc := string(body)
	if !gjson.Valid(doc) {
		return nil, errBadUpstream
	}
	root := gjson.Parse(doc)
	out := root.Get("output")
	if !root.IsObject() || !out.IsArray() {
		return nil, errBadUpstream
	}
	rd := &round{doc: doc, root: root, callAt: map[int]*call{},
		status: root.Get("status").Str, id: root.Get("id").Str, stored: root.Get("store").Type == gjson.True}
	out.ForEach(func(_, it gjson.Result) bool {
		idx := len(rd.items)
		rd.items = append(rd.items, it)
		typ := it.Get("type").Str
		if typ == "function_call" && (it.Get("name").Str == i.cfg.FunctionName || shellCalls && it.Get("name").Str == shelltool.FunctionName) {
			c := newCall(idx, it)
			if it.Get("name").Str == shelltool.FunctionName && it.Get("name").Str != i.cfg.FunctionName {
				c.shell = &shellCall{outID: idgen.NewTagged("sho_", 50)}
				c.ciID = idgen.NewTagged("sh_", 50)
				c.shell.action, c.argErr = shelltool.Decode(it.Get("arguments"))
				c.code = c.args
			}
			rd.calls = append(rd.calls, c)
			rd.callAt[idx] = c
		} else if clientCallTypes[typ] {
			rd.clientCalls = true
		}
		return true
	})
	return rd, nil
}

func newCall(idx int, it gjson.Result) *call {
	c := &call{index: idx, callID: it.Get("call_id").Str, args: it.Get("arguments").Str, ciID: idgen.NewTagged("ci_", 50)}
	if c.callID == "" {
		c.callID = "call_" + strings.TrimPrefix(c.ciID, "ci_")[:24]
	}
	c.code, c.argErr = argsCode(it.Get("arguments"))
	return c
}

// argsCode reads the code out of a call's arguments. When they are unusable
// argErr says why, and code is the raw arguments (what the client is shown).
func argsCode(a gjson.Result) (code, argErr string) {
	switch {
	case a.Type != gjson.String:
		return "", "the arguments are missing"
	case !gjson.Valid(a.Str) || !gjson.Parse(a.Str).IsObject():
		return a.Str, "the arguments are not a JSON object"
	}
	v := gjson.Get(a.Str, "code")
	if v.Type != gjson.String {
		return a.Str, `the arguments have no string field "code"`
	}
	return v.Str, ""
}
