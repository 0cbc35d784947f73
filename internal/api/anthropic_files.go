package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file is Anthropic's Files API shapes on the same store: a request
// to /v1/files that sends anthropic-version (every Anthropic client does)
// gets Anthropic's objects, pages and errors. An uploaded file is the same
// file either way (an OpenAI client's file_ids and an Anthropic client's
// container_upload name it alike). The files code execution creates in a
// container ("cfile_…", the file_id of a bash_code_execution_output) are
// found by id among the caller's containers and are downloadable; uploads
// are not (Anthropic's downloadable: false).

// anthropic reports whether r is an Anthropic client's.
func anthropic(r *http.Request) bool { return r.Header.Get("anthropic-version") != "" }

// anthropicFile is Anthropic's file object.
type anthropicFile struct {
	ID           string `json:"id"`
	Type         string `json:"type"`
	Filename     string `json:"filename"`
	MimeType     string `json:"mime_type"`
	SizeBytes    int64  `json:"size_bytes"`
	CreatedAt    string `json:"created_at"`
	Downloadable bool   `json:"downloadable"`
}

func anthropicFileJSON(f store.File) anthropicFile {
	name := baseName(f)
	return anthropicFile{ID: f.ID, Type: "file", Filename: name, MimeType: contentType(name), SizeBytes: f.Bytes,
		CreatedAt: time.Unix(f.CreatedAt, 0).UTC().Format(time.RFC3339), Downloadable: f.ContainerID != ""}
}

func writeAnthropicError(w http.ResponseWriter, e *apierror.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.AnthropicBody(), '\n'))
}

func (s *Server) anthropicStoreError(w http.ResponseWriter, r *http.Request, err error, id string) {
	var e *apierror.Error
	switch {
	case errors.As(err, &e):
		writeAnthropicError(w, e)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExpired):
		writeAnthropicError(w, &apierror.Error{Status: http.StatusNotFound, Message: "File not found: " + id})
	default:
		s.storeError(w, r, err, "file_id", "file", id) // logs; OpenAI's shape for a failure of the store
	}
}

// anthropicCreateFile is POST /v1/files: multipart `file`.
func (s *Server) anthropicCreateFile(w http.ResponseWriter, r *http.Request, owner string) {
	if mediaType(r) != "multipart/form-data" {
		writeAnthropicError(w, &apierror.Error{Status: http.StatusBadRequest, Message: "file: send multipart/form-data with a 'file' part"})
		return
	}
	f, e := s.readForm(w, r, maxFilesAPIName)
	if e != nil {
		writeAnthropicError(w, e)
		return
	}
	if !f.hasFile {
		writeAnthropicError(w, &apierror.Error{Status: http.StatusBadRequest, Message: "file: Field required"})
		return
	}
	now := s.now()
	var expires int64
	if s.cfg.FileLifetime > 0 {
		expires = now.Add(s.cfg.FileLifetime).Unix()
	}
	stored, err := s.st.PutFile(r.Context(), store.File{ID: idgen.New("file-"), Owner: owner, Filename: f.filename, CreatedAt: now.Unix(),
		Purpose: "user_data", ExpiresAt: expires}, f.data)
	if err != nil {
		s.anthropicStoreError(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, anthropicFileJSON(stored))
}

// anthropicListFiles is GET /v1/files: limit 1–1000 (default 20),
// after_id / before_id, newest first; {data, first_id, last_id, has_more}.
func (s *Server) anthropicListFiles(w http.ResponseWriter, r *http.Request, owner string) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeAnthropicError(w, &apierror.Error{Status: http.StatusBadRequest, Message: "limit: Input should be between 1 and 1000"})
			return
		}
		limit = n
	}
	if q.Get("before_id") != "" {
		writeAnthropicError(w, &apierror.Error{Status: http.StatusBadRequest, Message: "before_id: this server pages forward only (after_id)"})
		return
	}
	o := store.ListOptions{Limit: limit, Order: "desc", After: q.Get("after_id")}
	files, more, after, err := s.liveFiles(r.Context(), owner, o, func(store.File) bool { return true })
	if err != nil {
		s.anthropicStoreError(w, r, err, after)
		return
	}
	var data []anthropicFile
	for _, f := range files {
		data = append(data, anthropicFileJSON(f))
	}
	out := map[string]any{"data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if data == nil {
		out["data"] = []anthropicFile{}
	} else {
		out["first_id"], out["last_id"] = data[0].ID, data[len(data)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// anthropicFile finds id: a Files API file, or a file code execution made
// in one of the owner's containers.
func (s *Server) anthropicFind(w http.ResponseWriter, r *http.Request, owner, id string) (store.File, bool) {
	if !store.ValidID(id) {
		s.anthropicStoreError(w, r, store.ErrNotFound, id)
		return store.File{}, false
	}
	if !strings.HasPrefix(id, "cfile_") {
		f, err := s.st.GetFile(r.Context(), owner, "", id)
		if err == nil && f.ExpiresAt != 0 && f.ExpiresAt <= s.now().Unix() {
			err = store.ErrNotFound
		}
		if err != nil {
			s.anthropicStoreError(w, r, err, id)
			return store.File{}, false
		}
		return f, true
	}
	o := store.ListOptions{Limit: 100}
	for {
		page, more, err := s.st.ListContainers(r.Context(), owner, o)
		if err != nil {
			s.anthropicStoreError(w, r, err, id)
			return store.File{}, false
		}
		for _, c := range page {
			if f, err := s.st.GetFile(r.Context(), owner, c.ID, id); err == nil {
				return f, true
			}
		}
		if !more || len(page) == 0 {
			break
		}
		o.After = page[len(page)-1].ID
	}
	s.anthropicStoreError(w, r, store.ErrNotFound, id)
	return store.File{}, false
}

// anthropicGetFile is GET /v1/files/{id}.
func (s *Server) anthropicGetFile(w http.ResponseWriter, r *http.Request, owner string) {
	if f, ok := s.anthropicFind(w, r, owner, r.PathValue("id")); ok {
		writeJSON(w, http.StatusOK, anthropicFileJSON(f))
	}
}

// anthropicFileContent is GET /v1/files/{id}/content: downloadable files
// only (the ones code execution made), as Anthropic's.
func (s *Server) anthropicFileContent(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	f, ok := s.anthropicFind(w, r, owner, id)
	if !ok {
		return
	}
	if f.ContainerID == "" {
		writeAnthropicError(w, &apierror.Error{Status: http.StatusBadRequest, Message: "File " + id + " is not downloadable: only files created by code execution can be downloaded"})
		return
	}
	data, err := s.st.FileContent(r.Context(), owner, f.ContainerID, id)
	if err != nil {
		s.anthropicStoreError(w, r, err, id)
		return
	}
	writeContent(w, baseName(f), data)
}

// anthropicDeleteFile is DELETE /v1/files/{id}: {id, type: "file_deleted"}.
func (s *Server) anthropicDeleteFile(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	f, ok := s.anthropicFind(w, r, owner, id)
	if !ok {
		return
	}
	if err := s.st.DeleteFile(r.Context(), owner, f.ContainerID, id); err != nil {
		s.anthropicStoreError(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "file_deleted"})
}

// byClient serves an Anthropic client's request with a, anyone else's
// with o.
func byClient(o, a handler) handler {
	return func(w http.ResponseWriter, r *http.Request, owner string) {
		if anthropic(r) {
			a(w, r, owner)
			return
		}
		o(w, r, owner)
	}
}
