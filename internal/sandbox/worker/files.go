package worker

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/memfs"
)

// file answers one of the server's file operations on the scratch space.
// The memfs budget the guest's own writes are charged to bounds them: a
// put that does not fit is refused whole. memfs has no symbolic links (nor
// FIFOs), so there are none to follow: only directories and regular files.
func (w *worker) file(kind string, req *wire.FileRequest) *wire.FileResult {
	res := w.fileOp(kind, req)
	// A detail names a path of up to sandbox.MaxPathBytes; the server
	// refuses one above wire.MaxDetail as a broken protocol.
	res.Detail = clip(res.Detail, wire.MaxDetail)
	return res
}

func (w *worker) fileOp(kind string, req *wire.FileRequest) *wire.FileResult {
	res := &wire.FileResult{ID: req.ID}
	if kind == wire.KindRemove {
		res.Error, res.Detail = w.scratch.removeFiles(req.Paths)
		return res
	}
	f, mount, rel, ok := w.scratch.resolve(req.Path)
	if !ok {
		res.Error, res.Detail = wire.FileErrInvalid, "not under "+mountTmp+" or "+mountData
		return res
	}
	switch kind {
	case wire.KindPut:
		res.Error, res.Detail = putFile(f, rel, req.Data)
	case wire.KindGet:
		res.Data, res.Size, res.Error, res.Detail = getFile(f, rel, req.Max)
	case wire.KindList:
		res.Files, res.Truncated, res.Error, res.Detail = listFiles(f, mount, rel, req)
	}
	return res
}

// clip shortens s to at most n bytes of UTF-8, cutting between characters
// (JSON would carry a cut one as a longer U+FFFD).
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// putFile writes data to rel all or nothing, after making way for it:
// a file where one of rel's parents must be is removed and a directory made
// in its place, missing parents are made, and a directory at rel is removed
// with everything below it (memfs has nothing but directories and regular
// files). When the write fails, the directories it made are removed again,
// so a file that does not fit leaves nothing behind; what was removed to
// make way stays removed.
func putFile(f *memfs.FS, rel string, data []byte) (code, detail string) {
	if rel == "" {
		return wire.FileErrInvalid, "is a directory"
	}
	var made []string
	undo := func() {
		for i := len(made) - 1; i >= 0; i-- {
			f.Rmdir(made[i])
		}
	}
	parts := strings.Split(rel, "/")
	dir := ""
	for _, name := range parts[:len(parts)-1] {
		dir = path.Join(dir, name)
		st, errno := f.Stat(dir)
		switch {
		case errno == 0 && st.Mode.IsDir():
			continue
		case errno == 0:
			if errno := f.Unlink(dir); errno != 0 {
				undo()
				return errnoCode(errno), "unlink " + dir + ": " + errno.Error()
			}
		case errno != experimentalsys.ENOENT:
			undo()
			return errnoCode(errno), "stat " + dir + ": " + errno.Error()
		}
		if errno := f.Mkdir(dir, 0o755); errno != 0 {
			undo()
			return errnoCode(errno), "mkdir " + dir + ": " + errno.Error()
		}
		made = append(made, dir)
	}
	switch st, errno := f.Stat(rel); {
	case errno == 0 && st.Mode.IsDir():
		if errno := removeAll(f, rel); errno != 0 {
			undo()
			return errnoCode(errno), "remove " + rel + ": " + errno.Error()
		}
	case errno != 0 && errno != experimentalsys.ENOENT:
		undo()
		return errnoCode(errno), "stat " + rel + ": " + errno.Error()
	}
	if err := f.WriteFile(rel, data, 0o644); err != nil {
		undo()
		var errno experimentalsys.Errno
		if !errors.As(err, &errno) {
			return wire.FileErrIO, err.Error()
		}
		return errnoCode(errno), err.Error()
	}
	return "", ""
}

// removeFiles removes what is at each path: a file, or a directory with
// everything below it. Nothing at a path (nor a directory where a parent
// should be) is not an error.
func (sc *scratch) removeFiles(paths []string) (code, detail string) {
	type target struct {
		f   *memfs.FS
		rel string
	}
	targets := make([]target, len(paths))
	for i, p := range paths {
		f, _, rel, ok := sc.resolve(p)
		if !ok || rel == "" {
			return wire.FileErrInvalid, "not below " + mountTmp + " or " + mountData
		}
		targets[i] = target{f, rel}
	}
	for _, t := range targets {
		st, errno := t.f.Stat(t.rel)
		switch errno {
		case 0:
		case experimentalsys.ENOENT, experimentalsys.ENOTDIR, experimentalsys.ENAMETOOLONG:
			continue // nothing there
		default:
			return errnoCode(errno), "stat " + t.rel + ": " + errno.Error()
		}
		if st.Mode.IsDir() {
			errno = removeAll(t.f, t.rel)
		} else {
			errno = t.f.Unlink(t.rel)
		}
		if errno != 0 && errno != experimentalsys.ENOENT {
			return wire.FileErrIO, "remove " + t.rel + ": " + errno.Error()
		}
	}
	return "", ""
}

// removeAll removes directory rel and everything below it. memfs has only
// directories and regular files. It reads directories through memfs itself,
// not IOFS: io/fs refuses names that are not UTF-8, and the guest may make
// them.
func removeAll(f *memfs.FS, rel string) experimentalsys.Errno {
	d, errno := f.OpenFile(rel, experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
	if errno != 0 {
		return errno
	}
	entries, errno := d.Readdir(-1)
	d.Close()
	if errno != 0 {
		return errno
	}
	for _, e := range entries {
		p := rel + "/" + e.Name
		if e.Type.IsDir() {
			errno = removeAll(f, p)
		} else {
			errno = f.Unlink(p)
		}
		if errno != 0 && errno != experimentalsys.ENOENT {
			return errno
		}
	}
	return f.Rmdir(rel)
}

func getFile(f *memfs.FS, rel string, limit int64) (data []byte, size int64, code, detail string) {
	st, errno := f.Stat(rel)
	switch {
	case errno == experimentalsys.ENOENT || errno == experimentalsys.ENOTDIR:
		return nil, 0, wire.FileErrNotExist, "no such file"
	case errno != 0:
		return nil, 0, errnoCode(errno), errno.Error()
	case !st.Mode.IsRegular():
		return nil, 0, wire.FileErrNotRegular, st.Mode.Type().String()
	case st.Size > limit:
		return nil, st.Size, wire.FileErrTooLarge, "file too large"
	}
	data, err := fs.ReadFile(f.IOFS(), rel)
	if err != nil {
		return nil, 0, wire.FileErrIO, err.Error()
	}
	return data, int64(len(data)), "", ""
}

// listFiles lists the regular files below rel. When they are more than
// the answer's bounds allow (req.Max files, req.MaxPathTotal bytes of
// paths), it stops at the bound and says the listing is truncated.
func listFiles(f *memfs.FS, mount, rel string, req *wire.FileRequest) (files []wire.FileEntry, truncated bool, code, detail string) {
	st, errno := f.Stat(rel)
	switch {
	case errno == experimentalsys.ENOENT:
		return nil, false, wire.FileErrNotExist, "no such directory"
	case errno == experimentalsys.ENOTDIR || (errno == 0 && !st.Mode.IsDir()):
		return nil, false, wire.FileErrInvalid, "not a directory"
	case errno != 0:
		return nil, false, errnoCode(errno), errno.Error()
	}
	root := rel
	if root == "" {
		root = "."
	}
	total := 0
	err := fs.WalkDir(f.IOFS(), root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone since it was listed; the guest is idle, so never
		}
		full := path.Join(mount, p)
		// What the answer cannot name (JSON carries only UTF-8) or the
		// server could not address is left out; below a directory that
		// is, everything would be too.
		if !utf8.ValidString(full) || strings.IndexByte(full, 0) >= 0 || len(full) > req.MaxPath {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if int64(len(files)) >= req.Max || total+len(full) > req.MaxPathTotal {
			truncated = true
			return fs.SkipAll
		}
		total += len(full)
		files = append(files, wire.FileEntry{Path: full, Size: info.Size(), ModTimeNanos: info.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, false, wire.FileErrIO, err.Error()
	}
	return files, truncated, "", ""
}

// errnoCode maps a memfs errno to the protocol's codes.
func errnoCode(errno experimentalsys.Errno) string {
	switch errno {
	case memfs.ErrNoSpace:
		return wire.FileErrNoSpace
	case experimentalsys.ENOENT:
		return wire.FileErrNotExist
	case experimentalsys.ENOTDIR, experimentalsys.EISDIR, experimentalsys.ENAMETOOLONG, experimentalsys.EEXIST:
		return wire.FileErrInvalid
	}
	return wire.FileErrIO
}
