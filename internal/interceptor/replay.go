package interceptor

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/tidwall/gjson"
)

// mayReplayCalls is a quick test that input could hold a hosted tool's
// items (code_interpreter_call, shell_call); escaped is escapesToolLetter of the whole body. The search starts
// at '_', a rare byte, for the same reason as the markers'.
func mayReplayCalls(input gjson.Result, escaped bool) bool {
	return input.IsArray() && (escaped || strings.Contains(input.Raw, string(callMarker)) || strings.Contains(input.Raw, `shell_call`))
}

// rewriteInput turns replayed items of the hosted tools (a
// code_interpreter_call; a shell_call and its shell_call_output) into the
// function_call and function_call_output items the upstream model
// understands (tool.replay). Items no tool claims are left intact.
func (i *Interceptor) rewriteInput(input gjson.Result, escaped bool) (string, bool) {
	if !mayReplayCalls(input, escaped) {
		return input.Raw, false
	}
	var out []string
	changed := false
	calls := map[string]gjson.Result{} // replayed calls by call_id, for their outputs
	input.ForEach(func(_, it gjson.Result) bool {
		if it.IsObject() {
			for _, t := range i.tools {
				if model, ok := t.replay(i, it, calls); ok {
					out = append(out, model...)
					changed = true
					return true
				}
			}
		}
		out = append(out, it.Raw)
		return true
	})
	if !changed {
		return input.Raw, false
	}
	return string(jsonx.AppendArray(nil, out)), true
}

// replayCode is a replayed code_interpreter_call as the function call and
// output the model saw (ok false: its outputs are of a kind a text model
// cannot be told).
func (i *Interceptor) replayCode(it gjson.Result) ([]string, bool) {
	if it.Get("type").Str != "code_interpreter_call" || !replayable(it.Get("outputs")) {
		return nil, false
	}
	callID := replayCallID(it)
	args := string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("code", jsonx.Quote(it.Get("code").Str))))
	return []string{
		string(jsonx.AppendEditedObject(nil, `{}`,
			jsonx.Set("type", `"function_call"`),
			jsonx.Set("call_id", jsonx.Quote(callID)),
			jsonx.Set("name", jsonx.Quote(i.cfg.FunctionName)),
			jsonx.Set("arguments", jsonx.Quote(args)),
		)),
		string(jsonx.AppendEditedObject(nil, `{}`,
			jsonx.Set("type", `"function_call_output"`),
			jsonx.Set("call_id", jsonx.Quote(callID)),
			jsonx.Set("output", jsonx.Quote(replayOutput(it))),
		)),
	}, true
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
	b.WriteString(codeinterpreter.ImagesLine(n, types, true)) // the client had the outputs: it replays them
	return b.String()
}
