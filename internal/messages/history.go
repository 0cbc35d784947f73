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

// idPrefix starts the ids of the calls this server makes.
const idPrefix = "srvtoolu_"

// callID is a new call id of owner for tool name with input.
func (p *Processor) callID(owner, name, input string) string {
	var n [8]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	return idPrefix + nonce + p.callMAC(owner, nonce, name, input)
}

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
// into the messages the model server saw: assistant parts with tool_use
// blocks, each followed by a user turn of their tool_results (with the
// text the model was told). nil when the content holds none of our blocks.
func (p *Processor) replayHistory(owner, param string, content gjson.Result) ([]message, *apierror.Error) {
	if !strings.Contains(content.Raw, "server_tool_use") && !strings.Contains(content.Raw, "code_execution_tool_result") {
		return nil, nil
	}
	var parts []message
	var cur []string
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
			cur = append(cur, `{"type":"tool_use","id":`+jsonx.Quote(id)+`,"name":`+jsonx.Quote(name)+`,"input":`+input.Raw+`}`)
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
			res += "}"
			if len(cur) > 0 {
				parts = append(parts, message{role: "assistant", blocks: cur})
				cur = nil
				parts = append(parts, message{role: "user", blocks: []string{res}, results: true})
			} else if n := len(parts); n > 0 && parts[n-1].results {
				parts[n-1].blocks = append(parts[n-1].blocks, res)
			} else {
				apiErr = invalid(bp + ": a result without its call")
				return false
			}
		default:
			cur = append(cur, b.Raw)
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
	if len(cur) > 0 {
		parts = append(parts, message{role: "assistant", blocks: cur})
	}
	return parts, nil
}
