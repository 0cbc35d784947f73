package api

import (
	"encoding/json"
	"net/http"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// createContainerFile is POST /v1/containers/{id}/files: a multipart
// `file` part, a multipart `file_id` field (openai-go) or a JSON
// {"file_id"} (openai-python).
func (s *Server) createContainerFile(w http.ResponseWriter, r *http.Request, owner string) {
	cid := r.PathValue("id")
	if !s.useContainer(w, r, owner, cid) {
		return
	}
	var name, fileID string
	var data []byte
	switch mediaType(r) {
	case "multipart/form-data":
		f, e := s.readForm(w, r, maxContainerFileName, "file_id")
		if e != nil {
			writeError(w, e)
			return
		}
		fid, hasID := f.fields["file_id"]
		switch {
		case f.hasFile && hasID:
			writeError(w, apierror.Invalid("file_id", "invalid_request", "Provide either 'file' or 'file_id', not both."))
			return
		case f.hasFile:
			name, data = f.filename, f.data
		case hasID:
			fileID = fid
		default:
			writeError(w, apierror.Invalid("file", "missing_required_parameter", "Missing required parameter: 'file' (or 'file_id')."))
			return
		}
	case "application/json":
		body, e := readJSONObject(w, r)
		if e != nil {
			writeError(w, e)
			return
		}
		for _, k := range sortedKeys(body) {
			if k != "file_id" {
				writeError(w, apierror.Invalid(k, "unknown_parameter", "Unknown parameter: '%s'.", k))
				return
			}
			if err := json.Unmarshal(body[k], &fileID); err != nil {
				writeError(w, invalidType(k, "a string", body[k]))
				return
			}
		}
		if fileID == "" {
			writeError(w, apierror.Invalid("file_id", "missing_required_parameter", "Missing required parameter: 'file_id'."))
			return
		}
	default:
		writeError(w, apierror.Invalid("file", "invalid_content_type",
			"Unsupported Content-Type %q: send multipart/form-data with a 'file' part or a 'file_id' field, or JSON {\"file_id\": ...}.", r.Header.Get("Content-Type")))
		return
	}
	if fileID != "" {
		got, e := s.fetchFiles(r, "file_id", []string{fileID})
		if e != nil {
			writeError(w, e)
			return
		}
		name, data = got[0].name, got[0].data
	}
	f, err := s.st.PutFile(r.Context(), store.File{
		ID: idgen.New("cfile_"), Owner: owner, ContainerID: cid, Path: "/mnt/data/" + name,
		Filename: name, CreatedAt: s.now().Unix(), Source: "user",
	}, data)
	if err != nil {
		s.storeError(w, r, err, "container_id", "container", cid)
		return
	}
	writeJSON(w, http.StatusOK, containerFileJSON(f))
}

// listContainerFiles is GET /v1/containers/{id}/files.
func (s *Server) listContainerFiles(w http.ResponseWriter, r *http.Request, owner string) {
	cid := r.PathValue("id")
	o, e := listOptions(r, 20, 100)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.useContainer(w, r, owner, cid) {
		return
	}
	page, more, err := s.st.ListFiles(r.Context(), owner, cid, o)
	if err != nil {
		s.storeError(w, r, err, "container_id", "container", cid)
		return
	}
	data := make([]containerFileObject, len(page))
	for i, f := range page {
		data[i] = containerFileJSON(f)
	}
	writeJSON(w, http.StatusOK, newList(data, func(f containerFileObject) string { return f.ID }, more))
}

// containerFile touches the container and returns one of its files.
func (s *Server) containerFile(w http.ResponseWriter, r *http.Request, owner, cid, fid string) (store.File, bool) {
	if !s.useContainer(w, r, owner, cid) {
		return store.File{}, false
	}
	if !store.ValidID(fid) {
		s.storeError(w, r, store.ErrNotFound, "file_id", "container file", fid)
		return store.File{}, false
	}
	f, err := s.st.GetFile(r.Context(), owner, cid, fid)
	if err != nil {
		s.storeError(w, r, err, "file_id", "container file", fid)
		return store.File{}, false
	}
	return f, true
}

// getContainerFile is GET /v1/containers/{id}/files/{file_id}.
func (s *Server) getContainerFile(w http.ResponseWriter, r *http.Request, owner string) {
	if f, ok := s.containerFile(w, r, owner, r.PathValue("id"), r.PathValue("file_id")); ok {
		writeJSON(w, http.StatusOK, containerFileJSON(f))
	}
}

// deleteContainerFile is DELETE /v1/containers/{id}/files/{file_id}.
func (s *Server) deleteContainerFile(w http.ResponseWriter, r *http.Request, owner string) {
	cid, fid := r.PathValue("id"), r.PathValue("file_id")
	if !s.useContainer(w, r, owner, cid) {
		return
	}
	if !store.ValidID(fid) {
		s.storeError(w, r, store.ErrNotFound, "file_id", "container file", fid)
		return
	}
	if err := s.st.DeleteFile(r.Context(), owner, cid, fid); err != nil {
		s.storeError(w, r, err, "file_id", "container file", fid)
		return
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: fid, Object: "container.file.deleted", Deleted: true})
}

// containerFileContent is GET /v1/containers/{id}/files/{file_id}/content.
func (s *Server) containerFileContent(w http.ResponseWriter, r *http.Request, owner string) {
	cid, fid := r.PathValue("id"), r.PathValue("file_id")
	f, ok := s.containerFile(w, r, owner, cid, fid)
	if !ok {
		return
	}
	data, err := s.st.FileContent(r.Context(), owner, cid, fid)
	if err != nil {
		s.storeError(w, r, err, "file_id", "container file", fid)
		return
	}
	writeContent(w, baseName(f), data)
}
