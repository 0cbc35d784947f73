package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

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

func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// form is a parsed multipart upload.
type form struct {
	fields   map[string]string
	hasFile  bool
	filename string
	data     []byte
}

// readForm reads a multipart body as it arrives, bounded: the `file` part
// up to MaxUploadBytes (413 above), the named small fields, nothing else.
// Nothing is stored until the whole body has been read and checked.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request, maxName int, fields ...string) (*form, *apierror.Error) {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes+multipartSlack)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, apierror.Invalid("file", "invalid_multipart", "The multipart/form-data body could not be parsed: %v.", err)
	}
	f := &form{fields: map[string]string{}}
	readErr := func(param string, err error) *apierror.Error {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierror.TooLarge("file", "file_too_large", "The upload exceeds this server's limit of %d bytes.", s.cfg.MaxUploadBytes)
		}
		return apierror.Invalid(param, "invalid_multipart", "The multipart/form-data body is malformed: %v.", err)
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, readErr("file", err)
		}
		name := part.FormName()
		switch {
		case name == "file":
			if f.hasFile {
				return nil, apierror.Invalid("file", "duplicate_parameter", "Duplicate parameter: 'file'.")
			}
			fn, e := uploadName(part.FileName(), maxName)
			if e != nil {
				return nil, e
			}
			data, err := io.ReadAll(io.LimitReader(part, s.cfg.MaxUploadBytes+1))
			if err != nil {
				return nil, readErr("file", err)
			}
			if int64(len(data)) > s.cfg.MaxUploadBytes {
				return nil, apierror.TooLarge("file", "file_too_large", "The file exceeds this server's limit of %d bytes.", s.cfg.MaxUploadBytes)
			}
			f.hasFile, f.filename, f.data = true, fn, data
		case contains(fields, name):
			if _, dup := f.fields[name]; dup {
				return nil, apierror.Invalid(name, "duplicate_parameter", "Duplicate parameter: '%s'.", name)
			}
			v, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
			if err != nil {
				return nil, readErr(name, err)
			}
			if len(v) > maxFieldBytes {
				return nil, apierror.Invalid(name, "invalid_value", "Invalid value for '%s': longer than %d bytes.", name, maxFieldBytes)
			}
			f.fields[name] = string(v)
		case name == "":
			return nil, apierror.Invalid("", "invalid_multipart", "A multipart part has no form-data name.")
		default:
			return nil, apierror.Invalid(name, "unknown_parameter", "Unknown parameter: '%s'.", name)
		}
	}
	return f, nil
}

// uploadName checks the filename a client gave an upload: its base name
// (mime/multipart drops a path's directories, not a Windows path's a
// browser may send), at most max bytes (store.CheckFilename says what
// else).
func uploadName(fn string, max int) (string, *apierror.Error) {
	fn = store.BaseName(fn)
	if err := store.CheckFilename(fn, max); err != nil {
		return "", apierror.Invalid("file", "invalid_value", "Invalid value for 'file': the part needs a filename of 1-%d bytes of UTF-8 without '/' or control, format or line-separator characters, got %q: %v.", max, fn, err)
	}
	return fn, nil
}

// The longest names an upload may have. A container file's name is its
// path's last component; a Files API file attached to a container
// becomes /mnt/data/<file_id>-<filename>, so its name leaves room for the
// id. Both are refused at upload, never when code wants to use them.
const (
	maxContainerFileName = store.MaxNameBytes
	maxFilesAPIName      = store.MaxNameBytes - len("file-") - idgen.Digits - 1
)

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeContent sends a file's bytes with OpenAI's content-disposition.
func writeContent(w http.ResponseWriter, name string, data []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType(name))
	h.Set("Content-Disposition", ContentDisposition(name))
	h.Set("Content-Length", strconv.Itoa(len(data)))
	// The bytes are whatever the code wrote: never let a browser sniff
	// them into something executable.
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// ContentDisposition is OpenAI's header for a download named name, as
// recorded: `attachment; filename="file.csv";
// filename*=UTF-8”numbers_and_squares.csv`. The plain filename is always
// "file" plus the extension (so no quoting or charset questions arise);
// filename* carries the real name, percent-encoded (RFC 8187).
func ContentDisposition(name string) string {
	ext := ""
	if i := strings.LastIndexByte(name, '.'); i > 0 && len(name)-i <= 16 {
		ext = name[i:]
		for j := 1; j < len(ext); j++ {
			c := ext[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				ext = ""
				break
			}
		}
		if ext == "." {
			ext = ""
		}
	}
	return fmt.Sprintf(`attachment; filename="file%s"; filename*=UTF-8''%s`, ext, percentEncode(name))
}

// percentEncode keeps RFC 8187's attr-char and encodes every other byte.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// contentType is the type of the files code commonly writes, by
// extension. The system's mime tables are not used: they differ between
// machines (Debian's knows .csv, a bare container's does not), and a
// download's type must not.
func contentType(name string) string {
	ext := ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		ext = strings.ToLower(name[i:])
	}
	switch ext {
	case ".csv":
		return "text/csv"
	case ".tsv":
		return "text/tab-separated-values"
	case ".txt", ".log":
		return "text/plain"
	case ".md":
		return "text/markdown"
	case ".html", ".htm":
		return "text/html"
	case ".py":
		return "text/x-python"
	case ".json":
		return "application/json"
	case ".jsonl":
		return "application/jsonl"
	case ".xml":
		return "application/xml"
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".svg":
		return "image/svg+xml"
	case ".webp":
		return "image/webp"
	case ".pdf":
		return "application/pdf"
	case ".zip":
		return "application/zip"
	case ".gz":
		return "application/gzip"
	case ".tar":
		return "application/x-tar"
	case ".parquet":
		return "application/vnd.apache.parquet"
	case ".xlsx":
		return "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
	case ".xls":
		return "application/vnd.ms-excel"
	case ".docx":
		return "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
	case ".pptx":
		return "application/vnd.openxmlformats-officedocument.presentationml.presentation"
	}
	return "application/octet-stream"
}
