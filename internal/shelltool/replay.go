package shelltool

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Replay turns a replayed shell_call item into the function_call the
// model saw (ok false: not a hosted shell call of a container).
func Replay(it gjson.Result) (string, bool) {
	if it.Get("type").Str != "shell_call" || it.Get("environment.type").Str != "container_reference" {
		return "", false
	}
	args := jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("commands", nonNull(it.Get("action.commands").Raw, "[]")),
		jsonx.Set("timeout_ms", nonNull(it.Get("action.timeout_ms").Raw, "null")),
		jsonx.Set("max_output_length", nonNull(it.Get("action.max_output_length").Raw, "null")))
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function_call"`),
		jsonx.Set("call_id", jsonx.Quote(CallID(it))),
		jsonx.Set("name", jsonx.Quote(FunctionName)),
		jsonx.Set("arguments", jsonx.Quote(string(args))),
	)), true
}

// ReplayOutput turns a replayed shell_call_output into the
// function_call_output the model saw; calls are the shell_calls replayed
// before it (call_id → item), whose commands it names.
func ReplayOutput(it gjson.Result, calls map[string]gjson.Result) (string, bool) {
	if it.Get("type").Str != "shell_call_output" {
		return "", false
	}
	call, ok := calls[it.Get("call_id").Str]
	if !ok {
		return "", false
	}
	a := Action{}
	call.Get("action.commands").ForEach(func(_, c gjson.Result) bool {
		a.Commands = append(a.Commands, c.Str)
		return true
	})
	r := sandbox.Result{Outcome: sandbox.OutcomeCompleted}
	it.Get("output").ForEach(func(_, o gjson.Result) bool {
		r.Commands = append(r.Commands, sandbox.CommandResult{Stdout: o.Get("stdout").Str, Stderr: o.Get("stderr").Str,
			ExitCode: int(o.Get("outcome.exit_code").Int()), TimedOut: o.Get("outcome.type").Str == "timeout"})
		return true
	})
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function_call_output"`),
		jsonx.Set("call_id", jsonx.Quote(CallID(call))),
		jsonx.Set("output", jsonx.Quote(ModelOutput(a, r, "", ""))),
	)), true
}

// CallID derives the model's call id from the item's, so every replay of
// the same item yields the same pair.
func CallID(it gjson.Result) string {
	seed := it.Get("id").Str
	if seed == "" {
		seed = it.Get("call_id").Str
	}
	sum := sha256.Sum256([]byte("shell:" + seed))
	return "call_" + hex.EncodeToString(sum[:12])
}

func nonNull(raw, def string) string {
	if strings.TrimSpace(raw) == "" {
		return def
	}
	return raw
}
