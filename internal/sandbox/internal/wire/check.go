package wire

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// CheckFileResult checks r, the answer to file request req of the given
// kind, against the request: its id, its error code, and its bounds (the
// bytes of a read, the count, length and place of listed paths). The pool
// runs it on every kind's answers, whatever the kind checked (a gVisor
// kernel's come from a FIFO the guest can write to). An answer outside them
// is a broken interpreter, not data. A truncated listing is bounded like a
// complete one.
func CheckFileResult(kind string, req *FileRequest, r *FileResult) error {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("the interpreter broke protocol: "+why, args...)
	}
	if r == nil || r.ID != req.ID {
		return bad("an answer for another request")
	}
	if len(r.Detail) > MaxDetail {
		return bad("detail of %d bytes", len(r.Detail))
	}
	switch r.Error {
	case "":
	case FileErrNoSpace, FileErrNotExist, FileErrNotRegular, FileErrTooLarge,
		FileErrInvalid, FileErrIO:
		if len(r.Data) > 0 || len(r.Files) > 0 || r.Truncated {
			return bad("a refusal with data")
		}
		return nil
	default:
		return bad("error code %q", r.Error)
	}
	if r.Truncated && kind != KindList {
		return bad("a truncated answer to a %s", kind)
	}
	switch kind {
	case KindPut, KindRemove:
		if len(r.Data) > 0 || len(r.Files) > 0 || r.Size != 0 {
			return bad("data in the answer to a %s", kind)
		}
	case KindGet:
		if int64(len(r.Data)) > req.Max || r.Size != int64(len(r.Data)) || len(r.Files) > 0 {
			return bad("%d bytes (size %d) for a read of at most %d", len(r.Data), r.Size, req.Max)
		}
	case KindList:
		if len(r.Data) > 0 || int64(len(r.Files)) > req.Max {
			return bad("%d files listed, at most %d", len(r.Files), req.Max)
		}
		total := 0
		seen := make(map[string]struct{}, len(r.Files))
		for _, f := range r.Files {
			total += len(f.Path)
			_, dup := seen[f.Path]
			seen[f.Path] = struct{}{}
			if dup || !listedPath(req, f.Path) || f.Size < 0 {
				return bad("listed %q (%d bytes) below %s", f.Path, f.Size, req.Path)
			}
		}
		if total > req.MaxPathTotal {
			return bad("%d bytes of listed paths, at most %d", total, req.MaxPathTotal)
		}
	default:
		return bad("an answer to an unknown operation %q", kind)
	}
	return nil
}

// listedPath reports whether p may be listed in answer to listing req:
// clean, strictly inside req.Path, no longer than req.MaxPath, and nameable
// by the file operations.
func listedPath(req *FileRequest, p string) bool {
	return strings.HasPrefix(p, req.Path+"/") && path.Clean(p) == p &&
		len(p) <= req.MaxPath && utf8.ValidString(p) && strings.IndexByte(p, 0) < 0
}
