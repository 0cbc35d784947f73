package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

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

// The longest names an upload may have. A container file's name is its
// path's last component; a Files API file attached to a container
// becomes /mnt/data/<file_id>-<filename>, so its name leaves room for the
// id. Both are refused at upload, never when code wants to use them.
const (
	maxContainerFileName = store.MaxNameBytes
	maxFilesAPIName      = store.MaxNameBytes - len("file-") - idgen.Digits - 1
)
