package interceptor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file connects a request to its container (Containers): the
// declaration (an id, or auto with file_ids and the containers of replayed
// calls), the input_file parts copied in, the note that tells the model
// which files it has, and the file citations of the final answer.

// containerDecl is what the request said about its container.
type containerDecl struct {
	id      string
	fileIDs []string
	reuse   []string // containers of replayed hosted tools' items, newest first
	inputs  []containerapi.InputFile
	// skills are a container_auto's skills entries, named skillsParam.
	skills      []json.RawMessage
	skillsParam string
}

// maxFileIDs is OpenAI's bound on container file_ids.
const maxFileIDs = 50

// checkContainerID validates an explicit container id.
func checkContainerID(param, id string) *apierror.Error {
	if !strings.HasPrefix(id, "cntr_") || len(id) > 64 || len(id) < 6 {
		return apierror.Invalid(param, "invalid_value", "Invalid value for '%s': expected a container id (cntr_…), but got '%s'.", param, id)
	}
	return nil
}

// checkFileIDs reads a container's file_ids.
func checkFileIDs(param string, v gjson.Result) ([]string, *apierror.Error) {
	if v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsArray() {
		return nil, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an array of file ids.", param)
	}
	var ids []string
	var apiErr *apierror.Error
	v.ForEach(func(k, id gjson.Result) bool {
		if id.Type != gjson.String || id.Str == "" || len(id.Str) > 128 {
			apiErr = apierror.Invalid(param+"["+k.String()+"]", "invalid_value", "Invalid value for '%s[%s]': expected a file id.", param, k.String())
			return false
		}
		ids = append(ids, id.Str)
		return true
	})
	if apiErr == nil && len(ids) > maxFileIDs {
		apiErr = apierror.Invalid(param, "array_above_max_length", "Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", param, maxFileIDs, len(ids))
	}
	return ids, apiErr
}

// replayedContainers lists the container ids the hosted tools' items in
// input name, newest first, without duplicates.
func (i *Interceptor) replayedContainers(input gjson.Result) []string {
	var ids []string
	seen := map[string]bool{}
	input.ForEach(func(_, it gjson.Result) bool {
		if id := i.itemContainer(it); id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		return true
	})
	for l, r := 0, len(ids)-1; l < r; l, r = l+1, r-1 {
		ids[l], ids[r] = ids[r], ids[l]
	}
	return ids
}

// inputFiles finds the input_file parts of the input's messages. With note
// set (interceptor.input_files: note) each part is replaced by a text part
// saying where the file is, for models that reject file parts; otherwise
// the input is unchanged.
func inputFiles(input gjson.Result, note bool) (files []containerapi.InputFile, newInput string, changed bool, apiErr *apierror.Error) {
	if !input.IsArray() || !strings.Contains(input.Raw, "input_file") {
		return nil, input.Raw, false, nil
	}
	var items []string
	input.ForEach(func(ik, it gjson.Result) bool {
		content := it.Get("content")
		if !content.IsArray() {
			items = append(items, it.Raw)
			return true
		}
		var parts []string
		itemChanged := false
		content.ForEach(func(pk, p gjson.Result) bool {
			if p.Get("type").Str != "input_file" {
				parts = append(parts, p.Raw)
				return true
			}
			param := "input[" + ik.String() + "].content[" + pk.String() + "]"
			f, err := decodeInputFile(param, p)
			if err != nil {
				apiErr = err
				return false
			}
			if f == nil { // a file_url: the upstream's business
				parts = append(parts, p.Raw)
				return true
			}
			files = append(files, *f)
			if note {
				itemChanged = true
				parts = append(parts, string(jsonx.AppendEditedObject(nil, `{}`,
					jsonx.Set("type", `"input_text"`),
					jsonx.Set("text", jsonx.Quote(inputFileNote(*f))),
				)))
				return true
			}
			parts = append(parts, p.Raw)
			return true
		})
		if apiErr != nil {
			return false
		}
		if itemChanged {
			changed = true
			items = append(items, string(jsonx.EditObject(it.Raw, jsonx.Set("content", string(jsonx.AppendArray(nil, parts))))))
			return true
		}
		items = append(items, it.Raw)
		return true
	})
	if apiErr != nil {
		return nil, "", false, apiErr
	}
	if !changed {
		return files, input.Raw, false, nil
	}
	return files, string(jsonx.AppendArray(nil, items)), true, nil
}

// decodeInputFile reads one input_file part: file_data (a data URL or bare
// base64) with filename, or file_id. A file_url part gives nil.
func decodeInputFile(param string, p gjson.Result) (*containerapi.InputFile, *apierror.Error) {
	if id := p.Get("file_id"); id.Type == gjson.String && id.Str != "" {
		return &containerapi.InputFile{FileID: id.Str, Filename: p.Get("filename").Str}, nil
	}
	data := p.Get("file_data")
	if data.Type != gjson.String {
		if p.Get("file_url").Exists() {
			return nil, nil
		}
		return nil, apierror.Invalid(param, "missing_required_parameter", "Missing required parameter: '%s.file_data' or '%s.file_id'.", param, param)
	}
	name := p.Get("filename").Str
	if name == "" {
		return nil, apierror.Invalid(param+".filename", "missing_required_parameter", "Missing required parameter: '%s.filename' (with file_data).", param)
	}
	// The file becomes /mnt/data/<base name>: the name is held to what a
	// file system and a reader can take, as uploads are.
	base := store.BaseName(name)
	if err := store.CheckFilename(base, store.MaxNameBytes); err != nil {
		return nil, apierror.Invalid(param+".filename", "invalid_value", "Invalid value for '%s.filename': %v.", param, err)
	}
	raw := data.Str
	if strings.HasPrefix(raw, "data:") {
		_, b64, ok := strings.Cut(raw, ";base64,")
		if !ok {
			return nil, apierror.Invalid(param+".file_data", "invalid_value", "Invalid value for '%s.file_data': expected base64 data or a base64 data URL.", param)
		}
		raw = b64
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, apierror.Invalid(param+".file_data", "invalid_value", "Invalid value for '%s.file_data': the base64 data does not decode.", param)
	}
	return &containerapi.InputFile{Filename: base, Data: b}, nil
}

func inputFileNote(f containerapi.InputFile) string {
	name := f.Filename
	if f.FileID != "" {
		if name == "" {
			name = f.FileID
		}
		return "[The file " + containerapi.QuotePath(name) + " (" + f.FileID + ") is in the code interpreter's /mnt/data.]"
	}
	return "[The file " + containerapi.QuotePath(name) + " is in the code interpreter's /mnt/data as " + containerapi.QuotePath("/mnt/data/"+name) + ".]"
}

// NewExchange is RewriteRequest for a caller: when the request uses the
// code_interpreter and the server keeps containers, it also opens the
// response's container for the caller, copies the request's files in, and
// tells the model which files it has. An unknown container or file is a
// 404, an expired container a 400 "Container is expired.", as OpenAI
// answers.
//
// With a response store (WithResponses) it first resolves the request's
// history against the caller's stored responses (previous_response_id,
// item_reference, replayed calls without outputs; see HistoryMode), and an
// intercepted response gets an id of this server's.
func (i *Interceptor) NewExchange(ctx context.Context, caller Caller, body []byte) (*Exchange, error) {
	if i.PassesThrough(body) {
		return &Exchange{ic: i, req: request{upstream: body}, owner: caller.Owner}, nil
	}
	resolved, h, err := i.resolveHistory(ctx, caller.Owner, body)
	if err != nil {
		return nil, err
	}
	x, err := i.rewrite(resolved, h.ours())
	if x != nil {
		x.owner = caller.Owner
		x.adopt(h, resolved)
	}
	if err != nil || !x.req.hasTool || i.containers == nil {
		return x, err
	}
	if caller.Owner == "" {
		// Containers belong to a credential; a request without one
		// cannot have any (api.anonymous: reject).
		return nil, apierror.NoCredential()
	}
	d := x.req.container
	d.reuse = append(h.reuse, d.reuse...)
	c, err := i.containers.Open(ctx, containerapi.Spec{
		Owner: caller.Owner, Header: caller.Header, ID: d.id, Reuse: d.reuse, FileIDs: d.fileIDs,
		MemoryBytes: x.req.memoryBytes, Inputs: d.inputs, Network: x.req.network,
		Skills: d.skills, SkillsParam: d.skillsParam,
	})
	if err != nil {
		return nil, containerError(x.req.containerParam, d.id, err)
	}
	x.ctr = c
	if pol := c.Network(); pol != nil && x.req.network == nil {
		// A container named by id (or reused) keeps its own policy: the
		// model is told what that one allows.
		x.req.upstream = x.req.withFunctions(i, pol)
	}
	files, err := c.Files(ctx)
	if err != nil {
		_ = c.Close()
		return nil, &apierror.Error{Status: http.StatusInternalServerError, Type: apierror.TypeServer, Message: "The container's files could not be listed."}
	}
	if len(files) > 0 {
		x.req.appendInput(developerNote(filesNote(c.ID(), files)))
	}
	if note := skillsNote(c.Skills()); note != "" {
		// OpenAI gives the skills to the model in the user's context.
		x.req.appendInput(userNote(note))
	}
	return x, nil
}

// skillsNote is what the model is told of the container's skills.
func skillsNote(sk []store.ContainerSkill) string {
	m := make([]skills.Mounted, len(sk))
	for i, s := range sk {
		m[i] = skills.Mounted{Name: s.Name, Description: s.Description}
	}
	return skills.Context(m)
}

func userNote(text string) string {
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"message"`),
		jsonx.Set("role", `"user"`),
		jsonx.Set("content", jsonx.Quote(text)),
	))
}

func containerError(param, id string, err error) *apierror.Error {
	var ae *apierror.Error
	switch {
	case errors.As(err, &ae):
		return ae // the client's own mistake, named (a skills entry)
	case errors.Is(err, containerapi.ErrNotFound):
		return &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Param: param, Code: "container_not_found",
			Message: "Container with id '" + id + "' not found."}
	case errors.Is(err, containerapi.ErrExpired):
		return apierror.ContainerExpired(param)
	case errors.Is(err, containerapi.ErrFileNotFound):
		msg := strings.TrimPrefix(err.Error(), containerapi.ErrFileNotFound.Error()+": ")
		return &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Param: param + ".file_ids", Code: "file_not_found",
			Message: "File with id '" + msg + "' not found."}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, containerapi.ErrUnavailable):
		// Retryable, and the cause (which names servers) stays in the
		// server's log.
		return apierror.Server(http.StatusServiceUnavailable, "container_unavailable",
			"The container cannot be prepared right now (the server's store is unavailable). Please retry the request.")
	}
	return &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Param: param,
		Message: "The container could not be prepared: " + err.Error()}
}

// withFunctions is the upstream body with the declared tools' functions
// described for the network policy pol.
func (r *request) withFunctions(i *Interceptor, pol *egress.Policy) []byte {
	out := r.upstream
	for _, s := range r.tools {
		if s.at < 0 {
			continue
		}
		if b, err := sjson.SetRawBytes(out, "tools."+strconv.Itoa(s.at), []byte(i.function(s.t, pol))); err == nil {
			out = b
		}
	}
	return out
}

// appendInput adds an item at the end of the upstream request's input.
func (r *request) appendInput(item string) {
	items := arrayElems(r.input)
	items = append(items, item)
	r.input = string(jsonx.AppendArray(nil, items))
	r.upstream = jsonx.EditObject(string(r.upstream), jsonx.Set("input", r.input))
}

func developerNote(text string) string {
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"message"`),
		jsonx.Set("role", `"developer"`),
		jsonx.Set("content", jsonx.Quote(text)),
	))
}

// filesNote tells the model which files the code can open.
func filesNote(cid string, files []containerapi.File) string {
	var b strings.Builder
	b.WriteString("Files in /mnt/data of the code interpreter (container " + cid + "):\n")
	b.WriteString(containerapi.FileList(files))
	b.WriteString("Link a file for the user as sandbox:/mnt/data/<name>.")
	return b.String()
}

// citations finds every sandbox:/mnt/data/<name> link in text to a file of
// files and returns OpenAI's container_file_citation annotations, with
// start_index and end_index counting characters (code points) and
// spanning exactly the URL.
func citations(cid, text string, files map[string]containerapi.File) []string {
	const scheme = "sandbox:"
	var out []string
	pos, chars := 0, 0 // byte offset and its character offset
	for {
		k := strings.Index(text[pos:], scheme+"/mnt/data/")
		if k < 0 {
			return out
		}
		start := pos + k
		chars += utf8.RuneCountInString(text[pos:start])
		end := start + len(scheme)
		for end < len(text) && !strings.ContainsRune(" \t\r\n)]\"'<>`", rune(text[end])) {
			end++
		}
		url := text[start:end]
		n := utf8.RuneCountInString(url)
		if f, ok := files[strings.TrimPrefix(url, scheme)]; ok {
			out = append(out, citation(cid, f, chars, chars+n))
		}
		chars += n
		pos = end
	}
}

// citation renders one container_file_citation in OpenAI's field order.
func citation(cid string, f containerapi.File, start, end int) string {
	return `{"type":"container_file_citation","container_id":` + jsonx.Quote(cid) + `,"end_index":` + strconv.Itoa(end) +
		`,"file_id":` + jsonx.Quote(f.ID) + `,"filename":` + jsonx.Quote(f.Filename) + `,"start_index":` + strconv.Itoa(start) + `}`
}

// name records that the tool at param names container id: every tool of a
// request must name the same one (they share the response's container).
func (d *containerDecl) name(param, id string) *apierror.Error {
	if d.id != "" && d.id != id {
		return apierror.Invalid(param, "invalid_value",
			"Invalid value for '%s': the request's tools must use one container, but it names %s and another tool %s.", param, id, d.id)
	}
	d.id = id
	return nil
}
