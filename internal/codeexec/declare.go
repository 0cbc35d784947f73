package codeexec

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// The tool as a Messages request declares it.
const (
	// Name is the declaration's fixed name.
	Name = "code_execution"
	// Type20250825 is the version this server implements: bash and the
	// file editor in a container.
	Type20250825 = "code_execution_20250825"
	// Type20260120 and Type20260521 add a persistent Python REPL and
	// programmatic tool calling to it; they are served as 20250825 when
	// the request uses neither (no tool allows code execution to call it).
	Type20260120 = "code_execution_20260120"
	Type20260521 = "code_execution_20260521"
)

// The two tools the model server is given, by the names Anthropic's
// server_tool_use blocks carry.
const (
	BashName   = "bash_code_execution"
	EditorName = "text_editor_code_execution"
)

// IsDeclaration reports whether a tools[] entry of type typ is a version
// of the tool (supported or not).
func IsDeclaration(typ string) bool {
	return strings.HasPrefix(typ, "code_execution_")
}

// IsToolName reports whether name is one of the two tools' names.
func IsToolName(name string) bool { return name == BashName || name == EditorName }

// CheckDeclaration reads one tools[] entry of a code_execution type. param
// is its place in Anthropic's notation ("tools.0"). The message, when not
// empty, is Anthropic's 400 for it.
func CheckDeclaration(param string, t gjson.Result) string {
	typ := t.Get("type").Str
	switch typ {
	case Type20250825, Type20260120, Type20260521:
	default:
		return fmt.Sprintf("%s: this server supports the code execution tool versions %s, %s and %s, not %q", param, Type20250825, Type20260120, Type20260521, typ)
	}
	var msg string
	t.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type", "cache_control", "strict":
		case "name":
			if v.Str != Name {
				msg = fmt.Sprintf("%s.%s.name: Input should be '%s'", param, typ, Name)
			}
		case "allowed_callers":
			v.ForEach(func(_, c gjson.Result) bool {
				if c.Str != "direct" {
					msg = fmt.Sprintf("%s.%s.allowed_callers: this server runs code execution only as a direct call of the model, not %q", param, typ, c.Str)
				}
				return msg == ""
			})
		case "defer_loading":
			if v.Type == gjson.True {
				msg = fmt.Sprintf("%s.%s.defer_loading: this server does not defer loading the code execution tool", param, typ)
			}
		default:
			msg = fmt.Sprintf("%s.%s.%s: Extra inputs are not permitted", param, typ, k.Str)
		}
		return msg == ""
	})
	if msg == "" && !t.Get("name").Exists() {
		msg = fmt.Sprintf("%s.%s.name: Field required", param, typ)
	}
	return msg
}

// ProgrammaticCaller reports the message refusing a newer version's
// programmatic tool calling: a tool of the request (tools[i], in param)
// that allows code execution to call it, which this server cannot do.
func ProgrammaticCaller(param string, t gjson.Result) string {
	var msg string
	t.Get("allowed_callers").ForEach(func(_, c gjson.Result) bool {
		if IsDeclaration(c.Str) {
			msg = fmt.Sprintf("%s.allowed_callers: this server's code execution does not call tools from code (%q); only \"direct\" is supported", param, c.Str)
		}
		return msg == ""
	})
	return msg
}

// Environment is what the model is told of the container.
type Environment struct {
	// Packages are the Python packages the sandbox can import.
	Packages []string
	// Network says what the sandbox may reach; "" is no network.
	Network string
}

// tools are the two client tools, as Messages API tool objects, that the
// model server gets in the declaration's place.
func tools(env Environment) []string {
	net := "There is no network access."
	if env.Network != "" {
		net = env.Network
	}
	pkgs := ""
	if len(env.Packages) > 0 {
		pkgs = " Python 3 with " + strings.Join(env.Packages, ", ") + "."
	}
	bash := `{"name":"` + BashName + `","description":` + jsonx.Quote("Run a bash command in a sandboxed Linux container (Debian) and get its stdout, stderr and return code. "+
		"The container persists for this conversation: the working directory, exported variables and shell functions carry over to the next command, and so do files. "+
		"Commands start in /mnt/data: the files written under /mnt/data are returned to the user as files; elsewhere (/tmp) is scratch space."+pkgs+" "+net) +
		`,"input_schema":{"type":"object","properties":{"command":{"type":"string","description":"The bash command to run."}},"required":["command"]}}`
	editor := `{"name":"` + EditorName + `","description":` + jsonx.Quote("View, create or edit a file in the same container. "+
		"view shows a text file (optionally view_range [first, last] line, 1-based, -1 for the end) or lists a directory; "+
		"create writes file_text to path (replacing the file); str_replace replaces old_str, which must occur exactly once, with new_str. "+
		"Relative paths are from the bash session's working directory.") +
		`,"input_schema":{"type":"object","properties":{` +
		`"command":{"type":"string","enum":["view","create","str_replace"]},` +
		`"path":{"type":"string","description":"The file or directory."},` +
		`"file_text":{"type":"string","description":"create: the file's whole content."},` +
		`"old_str":{"type":"string","description":"str_replace: the text to replace, exactly as in the file."},` +
		`"new_str":{"type":"string","description":"str_replace: the replacement."},` +
		`"view_range":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"description":"view: [first line, last line]; -1 as last is the end."}` +
		`},"required":["command","path"]}}`
	return []string{bash, editor}
}
