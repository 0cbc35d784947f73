package memfs

import (
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// This file is the host's side: seeding input files before a run (uploads
// into /mnt/data) and collecting outputs after it, with ordinary io/fs
// errors. Paths are slash-separated and relative to the FS root; a leading
// slash is accepted.

// MkdirAll creates a directory and any missing parents, charging each to the
// budget.
func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	dir := ""
	for part := range strings.SplitSeq(strings.Trim(name, "/"), "/") {
		if part == "" || part == "." {
			continue
		}
		dir = path.Join(dir, part)
		switch errno := f.Mkdir(dir, perm); errno {
		case 0:
		case experimentalsys.EEXIST:
			if st, serr := f.Stat(dir); serr != 0 || !st.Mode.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: dir, Err: experimentalsys.ENOTDIR}
			}
		default:
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errno}
		}
	}
	return nil
}

// WriteFile creates or replaces the contents of a regular file. It is
// all-or-nothing: when data does not fit in the budget it fails with
// ErrNoSpace and leaves any existing file as it was.
func (f *FS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	fail := func(errno experimentalsys.Errno) error {
		return &fs.PathError{Op: "write", Path: name, Err: errno}
	}
	r, errno := f.resolve(name)
	switch {
	case errno != 0:
		return fail(errno)
	case r.dirs || (r.node != nil && r.node.isDir()):
		return fail(experimentalsys.EISDIR)
	}
	n := r.node
	var grow int64 = int64(len(data))
	if n != nil {
		grow -= n.size
	} else {
		grow += InodeCost
		if f.b.inodes >= f.b.maxInodes {
			f.b.noSpace++
			return fail(ErrNoSpace)
		}
	}
	if !f.b.charge(grow) {
		return fail(ErrNoSpace)
	}
	now := f.b.nowNanos()
	if n == nil {
		f.b.inodes++
		n = f.newInode(false, perm, now)
		link(r.parent, r.name, n)
		touchDir(r.parent, now)
	}
	n.setSize(0)
	n.writeAt(data, 0)
	n.size = int64(len(data))
	n.mtim, n.ctim = now, now
	return nil
}

// IOFS returns a read-only io/fs view of f for the host, implementing
// fs.ReadFileFS, fs.ReadDirFS and fs.StatFS, so fs.WalkDir and friends work.
func (f *FS) IOFS() fs.FS { return ioFS{f} }

type ioFS struct{ f *FS }

func (v ioFS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// Open implements fs.FS.
func (v ioFS) Open(name string) (fs.File, error) {
	if err := v.check("open", name); err != nil {
		return nil, err
	}
	h, errno := v.f.OpenFile(name, experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errno}
	}
	return &ioFile{h: h.(*file), name: name}, nil
}

// ReadFile implements fs.ReadFileFS.
func (v ioFS) ReadFile(name string) ([]byte, error) {
	if err := v.check("read", name); err != nil {
		return nil, err
	}
	f := v.f
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(name)
	switch {
	case errno != 0:
	case r.node == nil:
		errno = experimentalsys.ENOENT
	case r.node.isDir():
		errno = experimentalsys.EISDIR
	}
	if errno != 0 {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errno}
	}
	data := make([]byte, r.node.size)
	r.node.readAt(data, 0)
	return data, nil
}

// Stat implements fs.StatFS.
func (v ioFS) Stat(name string) (fs.FileInfo, error) {
	if err := v.check("stat", name); err != nil {
		return nil, err
	}
	st, errno := v.f.Stat(name)
	if errno != 0 {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: errno}
	}
	return fileInfo{name: path.Base(name), st: st}, nil
}

// ReadDir implements fs.ReadDirFS, sorted by name.
func (v ioFS) ReadDir(name string) ([]fs.DirEntry, error) {
	file, err := v.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	d, ok := file.(fs.ReadDirFile)
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: experimentalsys.ENOTDIR}
	}
	return d.ReadDir(-1)
}

// ioFile adapts an open handle to fs.File and fs.ReadDirFile.
type ioFile struct {
	h    *file
	name string
}

func (i *ioFile) Stat() (fs.FileInfo, error) {
	st, errno := i.h.Stat()
	if errno != 0 {
		return nil, &fs.PathError{Op: "stat", Path: i.name, Err: errno}
	}
	return fileInfo{name: path.Base(i.name), st: st}, nil
}

func (i *ioFile) Read(p []byte) (int, error) {
	n, errno := i.h.Read(p)
	switch {
	case errno != 0:
		return n, &fs.PathError{Op: "read", Path: i.name, Err: errno}
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (i *ioFile) Close() error {
	i.h.Close()
	return nil
}

func (i *ioFile) ReadDir(count int) ([]fs.DirEntry, error) {
	dirents, errno := i.h.Readdir(count)
	if errno != 0 {
		return nil, &fs.PathError{Op: "readdir", Path: i.name, Err: errno}
	}
	out := make([]fs.DirEntry, 0, len(dirents))
	for _, d := range dirents {
		st, errno := i.h.fs.Stat(path.Join(i.name, d.Name))
		if errno != 0 {
			continue // removed between listing and stat
		}
		out = append(out, fs.FileInfoToDirEntry(fileInfo{name: d.Name, st: st}))
	}
	if count > 0 && len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil // already in name order
}

// fileInfo is fs.FileInfo over a Stat_t; Sys returns *sys.Stat_t, which
// wazero's sys.NewStat_t understands.
type fileInfo struct {
	name string
	st   sys.Stat_t
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.st.Size }
func (i fileInfo) Mode() fs.FileMode  { return i.st.Mode }
func (i fileInfo) ModTime() time.Time { return time.Unix(0, i.st.Mtim) }
func (i fileInfo) IsDir() bool        { return i.st.Mode.IsDir() }
func (i fileInfo) Sys() any           { st := i.st; return &st }
