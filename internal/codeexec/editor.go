package codeexec

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"strings"
)

//go:embed editor.py
var editorProgram string

// editMark starts the editor's answer line (editor.py's MARK).
const editMark = "\x1eCODEINTERP-EDIT "

// editorCommand is the bash command that runs the editor on in: python3
// -I (no environment variable, user site or cwd on sys.path changes it)
// with the request as base64 on stdin, after the session's prologue so
// that relative paths are from the session's working directory.
func editorCommand(in EditInput, limit int) string {
	req := map[string]any{"command": in.Command, "path": in.Path, "limit": limit}
	if in.FileText != nil {
		req["file_text"] = *in.FileText
	}
	if in.OldStr != nil {
		req["old_str"] = *in.OldStr
	}
	if in.NewStr != nil {
		req["new_str"] = *in.NewStr
	}
	if in.ViewRange != nil {
		req["view_range"] = in.ViewRange
	}
	b, _ := json.Marshal(req) // strings, ints and slices only
	return SessionCommand("python3 -I -c " + shellQuote(editorProgram) + " <<'__CODEINTERP_EDIT__'\n" +
		base64.StdEncoding.EncodeToString(b) + "\n__CODEINTERP_EDIT__")
}

// editAnswer is editor.py's answer.
type editAnswer struct {
	OK      json.RawMessage `json:"ok"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
}

// parseEdit finds the editor's answer in its stdout: the last line that
// starts with the mark (a login profile may print before it).
func parseEdit(stdout string) (editAnswer, bool) {
	i := strings.LastIndex(stdout, editMark)
	if i < 0 {
		return editAnswer{}, false
	}
	line, _, _ := strings.Cut(stdout[i+len(editMark):], "\n")
	var a editAnswer
	if err := json.Unmarshal([]byte(line), &a); err != nil || (a.OK == nil && a.Error == "") {
		return editAnswer{}, false
	}
	return a, true
}
