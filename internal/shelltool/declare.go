package shelltool

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// FunctionName is the function the model server is given for the shell.
const FunctionName = "shell"

// Decl is a hosted shell declaration.
type Decl struct {
	// Reference is a container_reference's container_id ("" for auto).
	Reference string
	// Container is the raw container_auto environment (its file_ids,
	// memory_limit, network_policy), "" for a reference: the caller reads
	// it as it reads a code_interpreter's {"type":"auto"} container.
	Container gjson.Result
	// Skills are container_auto's skills entries, raw (none: nil), for
	// the new container (package skills resolves them).
	Skills []json.RawMessage
}

// Hosted reports whether t (one entry of "tools") is a shell this server
// runs: type shell with an environment of type container_auto or
// container_reference. A local environment, or none, is the client's.
func Hosted(t gjson.Result) bool {
	if !t.IsObject() || t.Get("type").Str != "shell" {
		return false
	}
	switch t.Get("environment.type").Str {
	case "container_auto", "container_reference":
		return true
	}
	return false
}

// Check validates a hosted declaration (Hosted(t)); param is "tools[i]".
// container_auto's skills are handed on as they are (Decl.Skills); the
// container's own fields are left to the caller (Decl.Container).
func Check(param string, t gjson.Result) (Decl, *apierror.Error) {
	var d Decl
	var apiErr *apierror.Error
	t.ForEach(func(k, v gjson.Result) bool {
		p := param + "." + k.Str
		switch k.Str {
		case "type":
		case "allowed_callers":
			if err := hostedtool.CheckAllowedCallers(p, v); err != nil {
				apiErr = err
			}
		case "environment":
			if k := jsonx.DuplicateKey(v.Raw); k != "" {
				apiErr = apierror.Invalid(p+"."+k, "duplicate_parameter", "Duplicate parameter: '%s.%s'.", p, k)
				return false
			}
			d, apiErr = checkEnvironment(p, v)
		default:
			apiErr = apierror.Invalid(p, "unknown_parameter", "Unknown parameter: '%s'.", p)
		}
		return apiErr == nil
	})
	return d, apiErr
}

func checkEnvironment(param string, e gjson.Result) (Decl, *apierror.Error) {
	var d Decl
	if e.Get("type").Str == "container_reference" {
		var apiErr *apierror.Error
		e.ForEach(func(k, v gjson.Result) bool {
			p := param + "." + k.Str
			switch k.Str {
			case "type":
			case "container_id":
				if v.Type != gjson.String || v.Str == "" {
					apiErr = apierror.Invalid(p, "invalid_type", "Invalid type for '%s': expected a container id.", p)
				}
				d.Reference = v.Str
			default:
				apiErr = apierror.Invalid(p, "unknown_parameter", "Unknown parameter: '%s'.", p)
			}
			return apiErr == nil
		})
		if apiErr == nil && d.Reference == "" {
			apiErr = apierror.Invalid(param+".container_id", "missing_required_parameter", "Missing required parameter: '%s.container_id'.", param)
		}
		return d, apiErr
	}
	// container_auto: its skills are the new container's; the rest is
	// the container's, as a code_interpreter's auto container.
	if s := e.Get("skills"); s.Exists() && s.Type != gjson.Null {
		if !s.IsArray() {
			return d, apierror.Invalid(param+".skills", "invalid_type", "Invalid type for '%s.skills': expected an array of skills.", param)
		}
		for _, k := range s.Array() {
			d.Skills = append(d.Skills, json.RawMessage(k.Raw))
		}
	}
	edits := []jsonx.Edit{jsonx.Set("type", `"auto"`)}
	if e.Get("skills").Exists() {
		edits = append(edits, jsonx.Del("skills"))
	}
	d.Container = gjson.Parse(string(jsonx.EditObject(e.Raw, edits...)))
	return d, nil
}

// Function is the function tool the model server gets for the shell, its
// parameters mirroring OpenAI's shell_call action; description says what
// the container offers.
func Function(description string) string {
	params := `{"type":"object","properties":{` +
		`"commands":{"type":"array","items":{"type":"string"},"description":"Shell commands to run in order, each by bash -lc in /mnt/data."},` +
		`"timeout_ms":{"type":["integer","null"],"description":"Each command's time limit in milliseconds (null: the default)."},` +
		`"max_output_length":{"type":["integer","null"],"description":"The most characters of each command's stdout and stderr together to return (null: all that is kept)."}` +
		`},"required":["commands","timeout_ms","max_output_length"],"additionalProperties":false}`
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function"`),
		jsonx.Set("name", jsonx.Quote(FunctionName)),
		jsonx.Set("description", jsonx.Quote(description)),
		jsonx.Set("parameters", params),
		jsonx.Set("strict", "true"),
	))
}

// Description is the function's description.
func Description(network string) string {
	d := "Runs shell commands in a sandboxed Debian container, each by `bash -lc` in /mnt/data with no TTY, and returns each command's stdout, stderr and exit code. " +
		"Files in /mnt/data are the user's container files and persist between calls; processes started in the background keep running. " +
		"The Python state of the code interpreter is not shared with the shell. "
	if network == "" {
		return d + "There is no network access."
	}
	return d + network
}
