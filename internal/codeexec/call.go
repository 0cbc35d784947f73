package codeexec

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Call is one tool_use of the model server for one of the two tools, as
// the client sees it: a server_tool_use block.
type Call struct {
	// ID is the client's id, "srvtoolu_…"; UpstreamID the model server's
	// own tool_use id, which its follow-up answers.
	ID, UpstreamID string
	// Name is BashName or EditorName; Input the model's input object as
	// it sent it (raw JSON).
	Name  string
	Input string
	// Bash or Edit is the decoded input; Why, when set, says why the
	// input is unusable (nothing runs: an invalid_tool_input result).
	Bash string
	Edit EditInput
	Why  string
	// limits are the tool's (Tool.Decode).
	limits Limits
}

// EditInput is a text_editor_code_execution input.
type EditInput struct {
	Command   string
	Path      string
	FileText  *string
	OldStr    *string
	NewStr    *string
	ViewRange []int
}

// Decode reads a tool_use's input for tool name.
func Decode(name string, input gjson.Result) Call {
	c := Call{Name: name, Input: input.Raw}
	if c.Input == "" {
		c.Input = "{}"
	}
	if !input.IsObject() {
		c.Why = "the input is not a JSON object"
		return c
	}
	str := func(field string) (*string, bool) {
		v := input.Get(field)
		if !v.Exists() || v.Type == gjson.Null {
			return nil, true
		}
		if v.Type != gjson.String {
			c.Why = fmt.Sprintf("%q must be a string", field)
			return nil, false
		}
		if (field == "command" || field == "path") && strings.ContainsRune(v.Str, 0) {
			// bash and paths cannot carry a NUL: say so instead of
			// failing in the sandbox.
			c.Why = fmt.Sprintf("%q contains a NUL character", field)
			return nil, false
		}
		return &v.Str, true
	}
	if name == BashName {
		cmd, ok := str("command")
		switch {
		case !ok:
		case cmd == nil || *cmd == "":
			c.Why = `"command" is required`
		default:
			c.Bash = *cmd
		}
		return c
	}
	cmd, ok := str("command")
	if !ok {
		return c
	}
	path, ok := str("path")
	if !ok {
		return c
	}
	switch {
	case cmd == nil:
		c.Why = `"command" is required`
		return c
	case *cmd != "view" && *cmd != "create" && *cmd != "str_replace":
		c.Why = fmt.Sprintf(`"command" must be view, create or str_replace, not %q`, *cmd)
		return c
	case path == nil || *path == "":
		c.Why = `"path" is required`
		return c
	}
	c.Edit = EditInput{Command: *cmd, Path: *path}
	for _, f := range []struct {
		name string
		dst  **string
	}{{"file_text", &c.Edit.FileText}, {"old_str", &c.Edit.OldStr}, {"new_str", &c.Edit.NewStr}} {
		v, ok := str(f.name)
		if !ok {
			return c
		}
		*f.dst = v
	}
	switch {
	case c.Edit.Command == "create" && c.Edit.FileText == nil:
		c.Why = `create needs "file_text"`
	case c.Edit.Command == "str_replace" && c.Edit.OldStr == nil:
		c.Why = `str_replace needs "old_str"`
	}
	if vr := input.Get("view_range"); vr.Exists() && vr.Type != gjson.Null {
		a := vr.Array()
		if !vr.IsArray() || len(a) != 2 || a[0].Type != gjson.Number || a[1].Type != gjson.Number ||
			float64(a[0].Int()) != a[0].Num || float64(a[1].Int()) != a[1].Num {
			c.Why = `"view_range" must be two integers [first, last]`
			return c
		}
		c.Edit.ViewRange = []int{int(a[0].Int()), int(a[1].Int())}
	}
	return c
}

// Request is the shell action that runs c in the container: one command,
// each call's own timeout (the operator's run timeout: Anthropic's bound
// is the container's, ours is per call). stdoutMax is the sandbox's
// stdout bound, which the editor's answer must fit in.
func (c Call) Request(timeout time.Duration, stdoutMax int) sandbox.ShellRequest {
	cmd := SessionCommand(c.Bash)
	if c.Name == EditorName {
		// The answer is JSON (escapes, base64 for images): a third of
		// the bound for the file's bytes leaves room for both.
		cmd = editorCommand(c.Edit, max(stdoutMax/3, 1024))
	}
	return sandbox.ShellRequest{Commands: []string{cmd}, Timeout: timeout}
}
