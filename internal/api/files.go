package api

import (
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

// listFiles is GET /v1/files (OpenAI's limit: 1 to 10000, default 10000;
// purpose filters).
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, owner string) {
	o, e := listOptions(r, 10000, 10000)
	if e != nil {
		writeError(w, e)
		return
	}
	purpose := r.URL.Query().Get("purpose")
	now := s.now().Unix()
	want := o.Limit
	var data []fileObject
	more := false
	// The store pages by at most 100 and knows no purposes: walk its pages
	// from `after`, keeping what matches, until one more than asked for is
	// seen (that one only says has_more).
	for {
		o.Limit = min(100, want+1-len(data))
		page, storeMore, err := s.st.ListFiles(r.Context(), owner, "", o)
		if err != nil {
			s.storeError(w, r, err, "after", "file", o.After)
			return
		}
		for _, f := range page {
			if (purpose != "" && f.Purpose != purpose) || (f.ExpiresAt != 0 && f.ExpiresAt <= now) {
				continue
			}
			if len(data) == want {
				more = true
				break
			}
			data = append(data, fileJSON(f))
		}
		if more || !storeMore || len(page) == 0 {
			break
		}
		o.After = page[len(page)-1].ID
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
