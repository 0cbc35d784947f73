package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// createFile is POST /v1/files: multipart `file` and `purpose` (any
// string: the purpose only labels the file here), and optionally
// expires_after[anchor]=created_at with expires_after[seconds].
func (s *Server) createFile(w http.ResponseWriter, r *http.Request, owner string) {
	if mediaType(r) != "multipart/form-data" {
		writeError(w, apierror.Invalid("file", "invalid_content_type", "Unsupported Content-Type %q: send multipart/form-data with 'file' and 'purpose'.", r.Header.Get("Content-Type")))
		return
	}
	f, e := s.readForm(w, r, maxFilesAPIName, "purpose", "expires_after[anchor]", "expires_after[seconds]")
	if e != nil {
		writeError(w, e)
		return
	}
	if !f.hasFile {
		writeError(w, apierror.Invalid("file", "missing_required_parameter", "Missing required parameter: 'file'."))
		return
	}
	purpose := f.fields["purpose"]
	if purpose == "" {
		writeError(w, apierror.Invalid("purpose", "missing_required_parameter", "Missing required parameter: 'purpose'."))
		return
	}
	now := s.now()
	lifetime := s.cfg.FileLifetime
	anchor, hasAnchor := f.fields["expires_after[anchor]"]
	secs, hasSecs := f.fields["expires_after[seconds]"]
	if hasAnchor || hasSecs {
		if anchor != "created_at" {
			writeError(w, apierror.Invalid("expires_after.anchor", "invalid_value", "Invalid value for 'expires_after.anchor': expected 'created_at'."))
			return
		}
		// OpenAI's range: one hour to thirty days.
		n, err := strconv.ParseInt(secs, 10, 64)
		if err != nil || n < 3600 || n > 2592000 {
			writeError(w, apierror.Invalid("expires_after.seconds", "invalid_value", "Invalid value for 'expires_after.seconds': expected an integer between 3600 and 2592000."))
			return
		}
		if d := time.Duration(n) * time.Second; lifetime == 0 || d < lifetime {
			lifetime = d
		}
	}
	var expires int64
	if lifetime > 0 {
		expires = now.Add(lifetime).Unix()
	}
	stored, err := s.st.PutFile(r.Context(), store.File{
		ID: idgen.New("file-"), Owner: owner, Filename: f.filename, CreatedAt: now.Unix(),
		Purpose: purpose, ExpiresAt: expires,
	}, f.data)
	if err != nil {
		s.storeError(w, r, err, "file", "file", "")
		return
	}
	writeJSON(w, http.StatusOK, fileJSON(stored))
}

// liveFiles walks the owner's files (not a container's) from o.After in
// o.Order, skipping expired ones and those keep refuses, until o.Limit are
// kept and one more is seen (that one only says more). The store pages by
// at most 100 and knows no purposes or expiry. after is the page's cursor
// an error came with.
func (s *Server) liveFiles(ctx context.Context, owner string, o store.ListOptions, keep func(store.File) bool) (files []store.File, more bool, after string, err error) {
	now := s.now().Unix()
	want := o.Limit
	for {
		o.Limit = min(100, want+1-len(files))
		page, storeMore, err := s.st.ListFiles(ctx, owner, "", o)
		if err != nil {
			return nil, false, o.After, err
		}
		for _, f := range page {
			if (f.ExpiresAt != 0 && f.ExpiresAt <= now) || !keep(f) {
				continue
			}
			if len(files) == want {
				return files, true, "", nil
			}
			files = append(files, f)
		}
		if !storeMore || len(page) == 0 {
			return files, false, "", nil
		}
		o.After = page[len(page)-1].ID
	}
}

// listFiles is GET /v1/files (OpenAI's limit: 1 to 10000, default 10000;
// purpose filters).
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, owner string) {
	o, e := listOptions(r, 10000, 10000)
	if e != nil {
		writeError(w, e)
		return
	}
	purpose := r.URL.Query().Get("purpose")
	files, more, after, err := s.liveFiles(r.Context(), owner, o, func(f store.File) bool {
		return purpose == "" || f.Purpose == purpose
	})
	if err != nil {
		s.storeError(w, r, err, "after", "file", after)
		return
	}
	data := make([]fileObject, len(files))
	for i, f := range files {
		data[i] = fileJSON(f)
	}
	writeJSON(w, http.StatusOK, newList(data, func(f fileObject) string { return f.ID }, more))
}

// file returns a live Files API file.
func (s *Server) file(w http.ResponseWriter, r *http.Request, owner, id string) (store.File, bool) {
	if !store.ValidID(id) {
		s.storeError(w, r, store.ErrNotFound, "file_id", "file", id)
		return store.File{}, false
	}
	f, err := s.st.GetFile(r.Context(), owner, "", id)
	if err == nil && f.ExpiresAt != 0 && f.ExpiresAt <= s.now().Unix() {
		err = store.ErrNotFound // expired: gone, whatever the store still holds
	}
	if err != nil {
		s.storeError(w, r, err, "file_id", "file", id)
		return store.File{}, false
	}
	return f, true
}

// getFile is GET /v1/files/{id}.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	if f, ok := s.file(w, r, owner, id); ok {
		writeJSON(w, http.StatusOK, fileJSON(f))
	}
}

// deleteFile is DELETE /v1/files/{id}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	if _, ok := s.file(w, r, owner, id); !ok {
		return
	}
	if err := s.st.DeleteFile(r.Context(), owner, "", id); err != nil {
		s.storeError(w, r, err, "file_id", "file", id)
		return
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: id, Object: "file", Deleted: true})
}

// fileContent is GET /v1/files/{id}/content.
func (s *Server) fileContent(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	f, ok := s.file(w, r, owner, id)
	if !ok {
		return
	}
	data, err := s.st.FileContent(r.Context(), owner, "", id)
	if err != nil {
		s.storeError(w, r, err, "file_id", "file", id)
		return
	}
	writeContent(w, f.Filename, data)
}

func baseName(f store.File) string {
	if f.Filename != "" {
		return f.Filename
	}
	return f.Path[strings.LastIndexByte(f.Path, '/')+1:]
}
