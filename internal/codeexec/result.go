package codeexec

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Anthropic's error codes of a result block.
const (
	ErrInvalidInput     = "invalid_tool_input"
	ErrUnavailable      = "unavailable"
	ErrTooManyRequests  = "too_many_requests"
	ErrTimeExceeded     = "execution_time_exceeded"
	ErrOutputFileTooBig = "output_file_too_large"
	ErrFileNotFound     = "file_not_found"
)

// ResultType is the type of the result block that answers a call of name.
func ResultType(name string) string { return name + "_tool_result" }

// Result is what became of a call: the content of its result block
// (Anthropic's), the text the model server is told, and whether that is
// an error.
type Result struct {
	Content string // raw JSON: the result block's "content"
	IsError bool
}

// Block is the result block the client sees for c.
func (c Call) Block(r Result) string {
	return `{"type":"` + ResultType(c.Name) + `","tool_use_id":` + jsonx.Quote(c.ID) + `,"content":` + r.Content + `}`
}

// ErrorResult is an error result of tool name (message: the editor's
// error_message; bash has none).
func ErrorResult(name, code, message string) Result {
	b := `{"type":"` + ResultType(name) + `_error","error_code":` + jsonx.Quote(code)
	if name == EditorName {
		m := "null"
		if message != "" {
			m = jsonx.Quote(message)
		}
		b += `,"error_message":` + m
	}
	return Result{Content: b + "}", IsError: true}
}

// Outcome reads what a run of c's Request did (rr and err from
// Container.Shell) as c's result.
func (c Call) Outcome(rr containerapi.RunResult, err error) Result {
	if err != nil {
		if errors.Is(err, containerapi.ErrSecretsLost) {
			return ErrorResult(c.Name, ErrUnavailable, "the container's network secrets are not held by this server")
		}
		return ErrorResult(c.Name, ErrUnavailable, "")
	}
	var cmd sandbox.CommandResult
	if len(rr.Commands) > 0 {
		cmd = rr.Commands[0]
	}
	switch {
	case rr.Outcome == sandbox.OutcomeRejected:
		return ErrorResult(c.Name, ErrInvalidInput, rr.Detail)
	case cmd.TimedOut || rr.Outcome == sandbox.OutcomeTimeout:
		return ErrorResult(c.Name, ErrTimeExceeded, "")
	case rr.Outcome == sandbox.OutcomeMemoryLimit:
		if c.Name == BashName {
			return c.bash(sandbox.CommandResult{Stdout: cmd.Stdout, Stderr: cmd.Stderr + "\nThe container ran out of memory; the command was killed and the container restarted.\n", ExitCode: 137}, nil)
		}
		return ErrorResult(c.Name, ErrUnavailable, "the container ran out of memory")
	case len(rr.Commands) == 0 || cmd.NotRun || (rr.Outcome != sandbox.OutcomeCompleted && rr.Outcome != sandbox.OutcomeOutputTruncated):
		return ErrorResult(c.Name, ErrUnavailable, "")
	}
	if c.Name == BashName {
		return c.bash(cmd, rr.Changed)
	}
	a, ok := parseEdit(cmd.Stdout)
	switch {
	case !ok:
		return ErrorResult(c.Name, ErrUnavailable, "the editor did not answer")
	case a.Error != "":
		code := a.Error
		if code != ErrFileNotFound {
			code = ErrInvalidInput
		}
		return ErrorResult(c.Name, code, a.Message)
	}
	return Result{Content: string(a.OK)}
}

func (c Call) bash(cmd sandbox.CommandResult, files []containerapi.File) Result {
	outs := make([]string, 0, len(files))
	for _, f := range files {
		outs = append(outs, `{"type":"bash_code_execution_output","file_id":`+jsonx.Quote(f.ID)+`}`)
	}
	stderr := cmd.Stderr
	if cmd.StdoutTruncated || cmd.StderrTruncated {
		stderr += "\n[output truncated: the command printed more than the sandbox keeps]\n"
	}
	return Result{Content: `{"type":"bash_code_execution_result","stdout":` + jsonx.Quote(cmd.Stdout) +
		`,"stderr":` + jsonx.Quote(stderr) + `,"return_code":` + strconv.Itoa(cmd.ExitCode) +
		`,"content":` + string(jsonx.AppendArray(nil, outs)) + `}`}
}

// ModelText is what the model server is told of a result (the content of
// its tool_result): made from the call's input and the result block's
// content alone, so that a replayed history tells the model the same.
func ModelText(name string, input, content gjson.Result) string {
	var b strings.Builder
	switch content.Get("type").Str {
	case "bash_code_execution_result":
		b.WriteString("return_code: " + content.Get("return_code").Raw + "\n")
		if s := content.Get("stdout").Str; s != "" {
			b.WriteString("stdout:\n" + s)
			if !strings.HasSuffix(s, "\n") {
				b.WriteString("\n")
			}
		}
		if s := content.Get("stderr").Str; s != "" {
			b.WriteString("stderr:\n" + s)
		}
		if n := len(content.Get("content").Array()); n > 0 {
			b.WriteString("(" + strconv.Itoa(n) + " file(s) written were saved for the user)\n")
		}
	case "text_editor_code_execution_view_result":
		if t := content.Get("file_type").Str; t != "text" {
			return "The file is " + map[bool]string{true: "an image", false: "a PDF"}[t == "image"] +
				" (" + strconv.Itoa(len(content.Get("content").Str)*3/4) + " bytes); the editor shows text files only."
		}
		first := int(content.Get("start_line").Int())
		lines := strings.Split(strings.TrimSuffix(content.Get("content").Str, "\n"), "\n")
		if content.Get("content").Str == "" {
			lines = nil
		}
		for k, l := range lines {
			b.WriteString(strconv.Itoa(first+k) + ": " + l + "\n")
		}
		if len(lines) == 0 {
			b.WriteString("(empty)\n")
		}
	case "text_editor_code_execution_create_result":
		verb := "created"
		if content.Get("is_file_update").Bool() {
			verb = "overwritten"
		}
		b.WriteString("File " + input.Get("path").Str + " " + verb + ".")
	case "text_editor_code_execution_str_replace_result":
		b.WriteString("Replaced in " + input.Get("path").Str + " at line " + content.Get("old_start").Raw + ":\n")
		content.Get("lines").ForEach(func(_, l gjson.Result) bool {
			b.WriteString(l.Str + "\n")
			return true
		})
	default:
		b.WriteString("Error: " + content.Get("error_code").Str)
		if m := content.Get("error_message").Str; m != "" {
			b.WriteString(": " + m)
		}
	}
	return b.String()
}
