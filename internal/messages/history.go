package messages

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// This file is the conversation a client sends back: the assistant's
// server_tool_use and *_tool_result blocks become the tool_use and
// tool_result the model server saw, and a call this server did not make
// is refused. A call's id proves it: "srvtoolu_" + a nonce + an HMAC, under
// the server's history key, of the owner, the nonce, the tool and its
// input. The result is the client's to keep (as the rest of the assistant
// message is); the call is not.
//
// The nonce's first half names the model's round that made the call, so
// that the calls of one round — which the client's message interleaves
// with their results, as Anthropic's does — go back to the model server as
// they were: one assistant turn with all the round's tool_use blocks, then
// one user turn with all their tool_results.

// idPrefix starts the ids of the calls this server makes.
const idPrefix = "srvtoolu_"

// newRound is a round's token: 8 hex digits.
func newRound() string {
	var n [4]byte
	_, _ = rand.Read(n[:])
	return hex.EncodeToString(n[:])
}

// callID is a new call id of owner, made in round (newRound), for tool
// name with input.
func (p *Processor) callID(owner, round, name, input string) string {
	var n [4]byte
	_, _ = rand.Read(n[:])
	nonce := round + hex.EncodeToString(n[:])
	return idPrefix + nonce + p.callMAC(owner, nonce, name, input)
}

// roundOf is the round token of a call id (one ours checked).
func roundOf(id string) string { return id[len(idPrefix) : len(idPrefix)+8] }

// callMAC is the hex HMAC that binds a call id.
func (p *Processor) callMAC(owner, nonce, name, input string) string {
	m := hmac.New(sha256.New, p.key)
	for _, s := range []string{owner, nonce, name, canonical(input)} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// ours reports whether id is a call this server made for owner.
func (p *Processor) ours(owner, id, name, input string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(rest) != 16+32 {
		return false
	}
	want := p.callMAC(owner, rest[:16], name, input)
	return hmac.Equal([]byte(rest[16:]), []byte(want))
}

// canonical is JSON with sorted keys and no spaces, as clients that decode
// and re-encode a block (every SDK) send it back.
func canonical(raw string) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return string(b)
}

// replayHistory splits an assistant message's content holding our blocks
// into the messages the model server saw: for each round with calls, an
// assistant turn with its blocks (text, tool_use) and a user turn of their
// tool_results (with the text the model was told). Blocks after a round's
// results wait: the next call of the same round takes them into its turn,
// a call of another round starts a new turn with them; at the end, a
// client tool's call (which ends a message) joins them to the last round,
// else they are the last assistant turn. nil when the content holds none
// of our blocks.
func (p *Processor) replayHistory(owner, param string, content gjson.Result) ([]message, *apierror.Error) {
	if !strings.Contains(content.Raw, "server_tool_use") && !strings.Contains(content.Raw, "code_execution_tool_result") {
		return nil, nil
	}
	var parts []message
	var turn, results, pending []string
	round := ""
	flush := func() {
		if len(turn) > 0 {
			parts = append(parts, message{role: "assistant", blocks: turn})
		}
		if len(results) > 0 {
			parts = append(parts, message{role: "user", blocks: results, results: true})
		}
		turn, results = nil, nil
	}
	calls := map[string]gjson.Result{} // the message's server_tool_use blocks by id
	answered := map[string]bool{}
	var apiErr *apierror.Error
	content.ForEach(func(k, b gjson.Result) bool {
		bp := param + ".content." + k.String()
		typ := b.Get("type").Str
		switch {
		case typ == "server_tool_use" && codeexec.IsToolName(b.Get("name").Str):
			id, name, input := b.Get("id").Str, b.Get("name").Str, b.Get("input")
			if !input.IsObject() || !p.ours(owner, id, name, input.Raw) {
				apiErr = invalid(bp + ": this server_tool_use block is not a call this server made (or its input was changed)")
				return false
			}
			if _, dup := calls[id]; dup {
				apiErr = invalid(bp + ".id: the call " + id + " appears twice")
				return false
			}
			calls[id] = b
			if len(results) > 0 && roundOf(id) != round {
				flush()
			}
			round = roundOf(id)
			turn = append(append(turn, pending...), `{"type":"tool_use","id":`+jsonx.Quote(id)+`,"name":`+jsonx.Quote(name)+`,"input":`+input.Raw+`}`)
			pending = nil
		case typ == codeexec.ResultType(codeexec.BashName) || typ == codeexec.ResultType(codeexec.EditorName):
			id := b.Get("tool_use_id").Str
			call, ok := calls[id]
			if !ok || answered[id] || codeexec.ResultType(call.Get("name").Str) != typ {
				apiErr = invalid(bp + ".tool_use_id: this result does not answer a call of this server before it in the message")
				return false
			}
			answered[id] = true
			c := b.Get("content")
			text := codeexec.ModelText(call.Get("name").Str, call.Get("input"), c)
			res := `{"type":"tool_result","tool_use_id":` + jsonx.Quote(id) + `,"content":` + jsonx.Quote(text)
			if strings.HasSuffix(c.Get("type").Str, "_error") {
				res += `,"is_error":true`
			}
			results = append(results, res+"}")
		case len(results) > 0:
			pending = append(pending, b.Raw)
		default:
			turn = append(turn, b.Raw)
		}
		return true
	})
	if apiErr != nil {
		return nil, apiErr
	}
	for id := range calls {
		if !answered[id] {
			return nil, invalid(param + ": the call " + id + " has no result block after it")
		}
	}
	for _, b := range pending {
		if gjson.Get(b, "type").Str == "tool_use" {
			turn, pending = append(turn, pending...), nil
			break
		}
	}
	flush()
	if len(pending) > 0 {
		parts = append(parts, message{role: "assistant", blocks: pending})
	}
	return parts, nil
}

// undeclaredBlock is the param and type of the first code execution block
// (a call of ours, its result, a container_upload) in a request that does
// not declare the tool; "" when there is none. Such a block reaches no model
// server: it could only be replayed as tool_use / tool_result for tools
// the request does not define, which a Messages server refuses.
func undeclaredBlock(msgs gjson.Result) (param, typ string) {
	found := ""
	msgs.ForEach(func(k, m gjson.Result) bool {
		m.Get("content").ForEach(func(bk, b gjson.Result) bool {
			typ := b.Get("type").Str
			if (typ == "server_tool_use" && codeexec.IsToolName(b.Get("name").Str)) || typ == "container_upload" ||
				typ == codeexec.ResultType(codeexec.BashName) || typ == codeexec.ResultType(codeexec.EditorName) {
				found, param = typ, "messages."+k.String()+".content."+bk.String()
			}
			return found == ""
		})
		return found == ""
	})
	return param, found
}
