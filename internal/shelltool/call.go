package shelltool

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Action is a decoded call: OpenAI's shell_call action.
type Action struct {
	Commands        []string
	TimeoutMS       int64 // 0: null
	MaxOutputLength int64 // 0: null
}

// MaxCommands bounds one call's commands.
const MaxCommands = 32

// Decode reads a call's arguments string. When they are unusable argErr
// says why (nothing runs).
func Decode(args gjson.Result) (a Action, argErr string) {
	if args.Type != gjson.String || !gjson.Valid(args.Str) || !gjson.Parse(args.Str).IsObject() {
		return a, "the arguments are not a JSON object"
	}
	v := gjson.Parse(args.Str)
	cmds := v.Get("commands")
	if !cmds.IsArray() {
		return a, `the arguments have no array "commands"`
	}
	ok := true
	cmds.ForEach(func(_, c gjson.Result) bool {
		ok = c.Type == gjson.String
		a.Commands = append(a.Commands, c.Str)
		return ok
	})
	switch {
	case !ok:
		return Action{}, `"commands" must hold strings`
	case len(a.Commands) == 0:
		return Action{}, `"commands" is empty`
	case len(a.Commands) > MaxCommands:
		return Action{}, "at most " + strconv.Itoa(MaxCommands) + " commands run in one call"
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"timeout_ms", &a.TimeoutMS}, {"max_output_length", &a.MaxOutputLength}} {
		x := v.Get(f.name)
		if !x.Exists() || x.Type == gjson.Null {
			continue
		}
		n, err := strconv.ParseInt(x.Raw, 10, 64)
		if x.Type != gjson.Number || err != nil || n <= 0 {
			return Action{}, `"` + f.name + `" must be a positive integer or null`
		}
		*f.dst = n
	}
	return a, ""
}

// Timeout is each command's time limit: the one asked for, bounded by max
// (the operator's), def when none was asked for.
func (a Action) Timeout(def, max time.Duration) time.Duration {
	if a.TimeoutMS <= 0 {
		return min(def, max)
	}
	return min(time.Duration(a.TimeoutMS)*time.Millisecond, max)
}

func nullable(n int64) string {
	if n <= 0 {
		return "null"
	}
	return strconv.FormatInt(n, 10)
}

// CallItem is the shell_call the client sees.
func CallItem(id, callID string, a Action, status, containerID string) string {
	cmds := make([]string, len(a.Commands))
	for k, c := range a.Commands {
		cmds[k] = jsonx.Quote(c)
	}
	return `{"id":` + jsonx.Quote(id) + `,"type":"shell_call","call_id":` + jsonx.Quote(callID) +
		`,"action":{"commands":` + string(jsonx.AppendArray(nil, cmds)) + `,"timeout_ms":` + nullable(a.TimeoutMS) +
		`,"max_output_length":` + nullable(a.MaxOutputLength) + `},"status":` + jsonx.Quote(status) +
		`,"environment":{"type":"container_reference","container_id":` + jsonx.Quote(containerID) + `}}`
}

// Entry is one command's entry of a shell_call_output's output.
func Entry(c sandbox.CommandResult) string {
	outcome := `{"type":"exit","exit_code":` + strconv.Itoa(c.ExitCode) + `}`
	if c.TimedOut {
		outcome = `{"type":"timeout"}`
	}
	return `{"stdout":` + jsonx.Quote(c.Stdout) + `,"stderr":` + jsonx.Quote(c.Stderr) + `,"outcome":` + outcome + `}`
}

// OutputItem is the shell_call_output the client sees: one entry per
// command (results already cut by Cut).
func OutputItem(id, callID, status string, a Action, results []sandbox.CommandResult) string {
	entries := make([]string, len(results))
	for k, c := range results {
		entries[k] = Entry(c)
	}
	return `{"id":` + jsonx.Quote(id) + `,"type":"shell_call_output","call_id":` + jsonx.Quote(callID) +
		`,"status":` + jsonx.Quote(status) + `,"max_output_length":` + nullable(a.MaxOutputLength) +
		`,"output":` + string(jsonx.AppendArray(nil, entries)) + `}`
}

// Cut keeps at most max characters of each command's stdout and stderr
// together (stdout first), as OpenAI applies max_output_length; max <= 0
// keeps everything.
func Cut(results []sandbox.CommandResult, max int64) []sandbox.CommandResult {
	if max <= 0 {
		return results
	}
	out := make([]sandbox.CommandResult, len(results))
	for k, c := range results {
		left := int(max)
		c.Stdout, left = keep(c.Stdout, left)
		c.Stderr, _ = keep(c.Stderr, left)
		out[k] = c
	}
	return out
}

func keep(s string, n int) (string, int) {
	if utf8.RuneCountInString(s) <= n {
		return s, n - utf8.RuneCountInString(s)
	}
	i := 0
	for k := 0; k < n; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i], 0
}

// ModelOutput is what the model is told of a call: per command its exit
// code or timeout, then its stdout and stderr. notRun/argErr say why
// nothing ran.
func ModelOutput(a Action, r sandbox.Result, argErr, notRun string) string {
	var b strings.Builder
	switch {
	case argErr != "":
		return "status: failed: invalid arguments (" + argErr + "); nothing was run. Call the tool with a JSON object like {\"commands\": [\"ls -l\"], \"timeout_ms\": null, \"max_output_length\": null}.\n"
	case notRun != "":
		return "status: incomplete: not run because " + notRun + ".\n"
	}
	if r.Outcome != sandbox.OutcomeCompleted && r.Outcome != sandbox.OutcomeOutputTruncated {
		b.WriteString("status: " + string(r.Outcome))
		if r.Detail != "" {
			b.WriteString(" (" + r.Detail + ")")
		}
		b.WriteString("\n")
	}
	results := Cut(r.Commands, a.MaxOutputLength)
	for k, c := range results {
		cmd := ""
		if k < len(a.Commands) {
			cmd = a.Commands[k]
		}
		b.WriteString("$ " + cmd + "\n")
		switch {
		case c.NotRun:
			b.WriteString("not run\n")
			continue
		case c.TimedOut:
			b.WriteString("outcome: timeout (killed)\n")
		default:
			b.WriteString("exit code: " + strconv.Itoa(c.ExitCode) + "\n")
		}
		section(&b, "stdout", c.Stdout, c.StdoutTruncated)
		section(&b, "stderr", c.Stderr, c.StderrTruncated)
	}
	return b.String()
}

func section(b *strings.Builder, name, text string, truncated bool) {
	if text == "" && !truncated {
		return
	}
	b.WriteString(name + ":\n" + text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	if truncated {
		b.WriteString("[" + name + " truncated]\n")
	}
}

// Status is the items' status for a call's fate.
func Status(r sandbox.Result, argErr, notRun string) string {
	switch {
	case argErr != "", notRun != "":
		return "incomplete"
	case r.Outcome == sandbox.OutcomeCompleted, r.Outcome == sandbox.OutcomeOutputTruncated:
		return "completed"
	}
	return "incomplete"
}
