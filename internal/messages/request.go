package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// request is a client's Messages request as this server handles it.
type request struct {
	// intercepted: the request declares code execution; upstream is the
	// body the model server gets (the client's when nothing changed).
	intercepted bool
	upstream    []byte
	stream      bool
	model       string
	// containerID is the request's container ("container": "cntr_…").
	containerID string
	// uploads are container_upload blocks' file ids, in order.
	uploads []string
	// skills are container.skills as this server's skill_reference
	// entries (containerSkills).
	skills []json.RawMessage
	// clientTools are the names of the request's own tools.
	clientTools map[string]bool
	// tools is the upstream's tools array, ours at index ours.
	tools []string
	ours  int
}

// mayUse is the pass-through test: a body without these letters declares
// no code execution and holds none of its blocks.
func mayUse(body []byte) bool {
	return bytes.Contains(body, []byte("code_execution")) || bytes.Contains(body, []byte("container_upload"))
}

// rewrite reads a client's body. A request that does not declare the tool
// is left as it is (not intercepted); one that does gets the two tools,
// the tool_choice naming them, its history as the model saw it, stream
// off and its container_upload blocks replaced by a note of where the file is.
func (p *Processor) rewrite(owner string, body []byte) (*request, *apierror.Error) {
	if !gjson.ValidBytes(body) {
		return nil, invalid("The request body is not valid JSON.")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, invalid("The request body must be a JSON object.")
	}
	r := &request{upstream: body, clientTools: map[string]bool{}, stream: root.Get("stream").Type == gjson.True, model: root.Get("model").Str}
	declared := -1
	var tools []string
	var apiErr *apierror.Error
	root.Get("tools").ForEach(func(k, t gjson.Result) bool {
		param := "tools." + k.String()
		typ := t.Get("type").Str
		if codeexec.IsDeclaration(typ) {
			if msg := codeexec.CheckDeclaration(param, t); msg != "" {
				apiErr = invalid(msg)
				return false
			}
			if declared >= 0 {
				apiErr = invalid(param + ": the code execution tool is declared twice")
				return false
			}
			declared = int(k.Int())
			r.ours = len(tools)
			if !p.hasShell {
				apiErr = invalid(param + ": code execution needs a sandbox with a shell; this server's sandbox provider runs Python only (sandbox.provider: gvisor has bash)")
				return false
			}
			tools = append(tools, p.clientTools(nil)...)
			return true
		}
		name := t.Get("name").Str
		if p.tools[name] != nil || name == codeexec.Name {
			apiErr = invalid(fmt.Sprintf("%s.name: %q is the name of a code execution tool", param, name))
			return false
		}
		if msg := codeexec.ProgrammaticCaller(param, t); msg != "" {
			apiErr = invalid(msg)
			return false
		}
		r.clientTools[name] = true
		tools = append(tools, t.Raw)
		return true
	})
	if apiErr != nil {
		return nil, apiErr
	}
	if declared < 0 {
		if at, typ := undeclaredBlock(root.Get("messages")); at != "" {
			return nil, invalid(fmt.Sprintf("%s: a %s block needs the code execution tool in tools (%s)", at, typ,
				`{"type": "code_execution_20250825", "name": "code_execution"}`))
		}
		return r, nil
	}
	r.intercepted = true
	r.tools = tools
	edits := []jsonx.Edit{jsonx.Set("tools", string(jsonx.AppendArray(nil, tools)))}
	if r.stream {
		edits = append(edits, jsonx.Set("stream", "false"))
	}
	if tc := root.Get("tool_choice"); tc.Exists() && tc.Get("name").Str == codeexec.Name {
		choice := `{"type":"tool","name":"` + codeexec.BashName + `"}`
		if len(r.clientTools) == 0 {
			choice = `{"type":"any"}` // either of the two
		}
		if d := tc.Get("disable_parallel_tool_use"); d.Exists() {
			choice = string(jsonx.EditObject(choice, jsonx.Set("disable_parallel_tool_use", d.Raw)))
		}
		edits = append(edits, jsonx.Set("tool_choice", choice))
	}
	switch c := root.Get("container"); {
	case !c.Exists() || c.Type == gjson.Null:
	case c.Type == gjson.String:
		r.containerID = c.Str
	case c.IsObject() && (c.Get("id").Type == gjson.String || !c.Get("id").Exists() || c.Get("id").Type == gjson.Null):
		skills, apiErr := containerSkills(c.Get("skills"))
		if apiErr != nil {
			return nil, apiErr
		}
		r.skills = skills
		r.containerID = c.Get("id").Str
	default:
		return nil, invalid("container: expected a container id (a string) or {id?, skills?}")
	}
	if r.containerID != "" {
		if !strings.HasPrefix(r.containerID, "cntr_") || len(r.containerID) > 64 {
			return nil, invalid(fmt.Sprintf("container: %q is not a container of this server (cntr_…)", r.containerID))
		}
	}
	if root.Get("container").Exists() {
		edits = append(edits, jsonx.Del("container")) // the model server's own containers are not ours
	}
	msgs, err := p.rewriteMessages(owner, root.Get("messages"), r)
	if err != nil {
		return nil, err
	}
	edits = append(edits, jsonx.Set("messages", msgs))
	r.upstream = jsonx.EditObject(root.Raw, edits...)
	return r, nil
}

// rewriteMessages is the conversation as the model server sees it:
// sent-back server_tool_use and *_tool_result blocks (replayHistory) and
// container_upload blocks, which become a text note naming the file's
// path in the container.
func (p *Processor) rewriteMessages(owner string, msgs gjson.Result, r *request) (string, *apierror.Error) {
	if !msgs.IsArray() {
		return "", invalid("messages: Field required")
	}
	var out []message
	var apiErr *apierror.Error
	msgs.ForEach(func(k, m gjson.Result) bool {
		param := "messages." + k.String()
		content := m.Get("content")
		if !content.IsArray() {
			out = appendMessage(out, message{role: m.Get("role").Str, raw: m.Raw})
			return true
		}
		if m.Get("role").Str == "assistant" {
			parts, err := p.replayHistory(owner, param, content)
			if err != nil {
				apiErr = err
				return false
			}
			if parts == nil {
				out = appendMessage(out, message{role: "assistant", raw: m.Raw})
			}
			for _, part := range parts {
				out = appendMessage(out, part)
			}
			return true
		}
		var blocks []string
		changed := false
		content.ForEach(func(bk, b gjson.Result) bool {
			if b.Get("type").Str != "container_upload" {
				blocks = append(blocks, b.Raw)
				return true
			}
			id := b.Get("file_id").Str
			if id == "" || len(id) > 128 {
				apiErr = invalid(param + ".content." + bk.String() + ".file_id: Field required")
				return false
			}
			r.uploads = append(r.uploads, id)
			changed = true
			blocks = append(blocks, `{"type":"text","text":`+jsonx.Quote("[The file "+id+" was uploaded into the code execution container as /mnt/data/"+id+"-<its filename> (ls /mnt/data/"+id+"-*).]")+`}`)
			return true
		})
		if apiErr != nil {
			return false
		}
		msg := message{role: m.Get("role").Str, raw: m.Raw}
		if changed {
			msg = message{role: msg.role, raw: string(jsonx.EditObject(m.Raw, jsonx.Set("content", string(jsonx.AppendArray(nil, blocks)))))}
		}
		out = appendMessage(out, msg)
		return true
	})
	if apiErr != nil {
		return "", apiErr
	}
	raws := make([]string, len(out))
	for k, m := range out {
		raws[k] = m.render()
	}
	return string(jsonx.AppendArray(nil, raws)), nil
}

// message is one message of the conversation the model server gets: as
// the client sent it (raw), or made of blocks (a replayed call's parts).
type message struct {
	role   string
	raw    string
	blocks []string
	// results: a user turn of tool results made from history, which the
	// next user message joins.
	results bool
}

func (m message) render() string {
	if m.blocks == nil {
		return m.raw
	}
	return `{"role":` + jsonx.Quote(m.role) + `,"content":` + string(jsonx.AppendArray(nil, m.blocks)) + `}`
}

// contentBlocks is m's content as blocks.
func (m message) contentBlocks() []string {
	if m.blocks != nil {
		return m.blocks
	}
	c := gjson.Get(m.raw, "content")
	if c.Type == gjson.String {
		return []string{`{"type":"text","text":` + c.Raw + `}`}
	}
	var bs []string
	c.ForEach(func(_, b gjson.Result) bool { bs = append(bs, b.Raw); return true })
	return bs
}

// appendMessage appends m to out; a user message after a user turn of
// tool results joins it (results first), since the Messages API wants the
// results at the start of the turn after the calls, in one user message.
func appendMessage(out []message, m message) []message {
	if n := len(out); n > 0 && m.role == "user" && out[n-1].results {
		out[n-1].blocks = append(out[n-1].blocks, m.contentBlocks()...)
		out[n-1].results = m.results
		return out
	}
	return append(out, m)
}

func itoa(n int) string { return strconv.Itoa(n) }

// clientTools are the hosted tools as the Messages API's client tools
// (name, description, input_schema), from each tool's function.
func (p *Processor) clientTools(pol *egress.Policy) []string {
	var out []string
	for _, name := range []string{codeexec.BashName, codeexec.EditorName} {
		f := gjson.Parse(p.tools[name].Function(p.cfg.Environment, pol))
		out = append(out, `{"name":`+f.Get("name").Raw+`,"description":`+f.Get("description").Raw+`,"input_schema":`+f.Get("parameters").Raw+`}`)
	}
	return out
}

// withNetwork is the upstream body with the tools describing pol, the
// network policy of the container the request named (made with one
// through the Containers API).
func (r *request) withNetwork(p *Processor, pol *egress.Policy) []byte {
	tools := append([]string(nil), r.tools...)
	copy(tools[r.ours:], p.clientTools(pol))
	return jsonx.EditObject(string(r.upstream), jsonx.Set("tools", string(jsonx.AppendArray(nil, tools))))
}

// withNote is body with a text block holding note at the end of its last
// user message (the turn the model answers).
func withNote(body []byte, note string) []byte {
	msgs := gjson.GetBytes(body, "messages").Array()
	for k := len(msgs) - 1; k >= 0; k-- {
		if msgs[k].Get("role").Str != "user" {
			continue
		}
		m := message{role: "user", raw: msgs[k].Raw}
		blocks := append(m.contentBlocks(), `{"type":"text","text":`+jsonx.Quote(note)+`}`)
		raw := make([]string, len(msgs))
		for j, o := range msgs {
			raw[j] = o.Raw
		}
		raw[k] = string(jsonx.EditObject(msgs[k].Raw, jsonx.Set("content", string(jsonx.AppendArray(nil, blocks)))))
		return jsonx.EditObject(string(body), jsonx.Set("messages", string(jsonx.AppendArray(nil, raw))))
	}
	return body
}

// skillsParam names container.skills in a refusal.
const skillsParam = "container.skills"

// containerSkills reads Anthropic's container.skills: a "custom" skill
// {type, skill_id, version?} is a skill of this server's Skills API
// (/v1/skills), mounted as the Responses API's skill_reference is; an
// "anthropic" one (Anthropic's prebuilt pptx, xlsx, …) is not on this
// server: Anthropic's 400 naming the entry.
func containerSkills(v gjson.Result) ([]json.RawMessage, *apierror.Error) {
	if !v.Exists() || v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsArray() {
		return nil, invalid(skillsParam + ": expected an array of skills")
	}
	var out []json.RawMessage
	var apiErr *apierror.Error
	v.ForEach(func(k, e gjson.Result) bool {
		p := skillsParam + "." + k.String()
		id := e.Get("skill_id")
		switch {
		case !e.IsObject():
			apiErr = invalid(p + ": expected an object {type, skill_id, version?}")
		case e.Get("type").Str == "anthropic":
			apiErr = invalid(fmt.Sprintf("%s: %q is one of Anthropic's prebuilt skills, which this server does not have; upload the skill to /v1/skills and name it as {\"type\": \"custom\", \"skill_id\": \"skill_…\"}", p, id.Str))
		case e.Get("type").Str != "custom":
			apiErr = invalid(p + ".type: expected \"custom\" (a skill of /v1/skills) or \"anthropic\"")
		case id.Type != gjson.String || id.Str == "":
			apiErr = invalid(p + ".skill_id: Field required")
		default:
			ref := `{"type":"skill_reference","skill_id":` + id.Raw
			if ver := e.Get("version"); ver.Exists() && ver.Type != gjson.Null {
				ref += `,"version":` + ver.Raw
			}
			out = append(out, json.RawMessage(ref+"}"))
		}
		return apiErr == nil
	})
	return out, apiErr
}
