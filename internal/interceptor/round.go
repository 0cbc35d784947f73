package interceptor

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// This file reads one upstream answer as a round: its output items and the
// calls of our function among them, each with the code it carries.

// call is one call of a hosted tool's function found in a model turn.
type call struct {
	index  int    // position in the round's output
	callID string // the model's call_id, echoed in function_call_output
	tool   tool   // the hosted tool whose function it calls
	act    hostedtool.Action
	code   string // act.Text(): the code, or the raw arguments when unusable
	ciID   string // the id of the call's (first) client item
	// moreIDs are the ids of the client items that follow the first
	// (the shell's shell_call_output).
	moreIDs []string

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
}

// itemIDs are the ids of the client's items for c, in order.
func (c *call) itemIDs() []string { return append([]string{c.ciID}, c.moreIDs...) }

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

// parseRound reads an upstream answer; the calls of r's tools' functions
// in it are the round's calls.
func parseRound(body []byte, r *request) (*round, error) {
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
		if t := r.toolFor(it.Get("name").Str); typ == "function_call" && t != nil {
			c := newCall(idx, it, t)
			rd.calls = append(rd.calls, c)
			rd.callAt[idx] = c
		} else if clientCallTypes[typ] {
			rd.clientCalls = true
		}
		return true
	})
	return rd, nil
}

// newCall decodes one call of t's function, the item it at output index idx.
func newCall(idx int, it gjson.Result, t tool) *call {
	ids := t.newIDs()
	c := &call{index: idx, callID: it.Get("call_id").Str, tool: t, ciID: ids[0], moreIDs: ids[1:]}
	if c.callID == "" {
		_, rest, _ := strings.Cut(c.ciID, "_")
		c.callID = "call_" + rest[:min(24, len(rest))]
	}
	c.act = t.Decode(it.Get("arguments"))
	c.code, c.argErr = c.act.Text(), c.act.Invalid()
	return c
}
