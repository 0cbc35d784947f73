package memfs

import (
	"io"
	"io/fs"
	"math"
	"slices"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// file is an open handle on an inode. Its fields are guarded by the Budget
// mutex: wazero may call it from any goroutine the guest runs on, and the
// host may stat concurrently.
type file struct {
	experimentalsys.UnimplementedFile

	fs       *FS
	n        *inode
	dir      bool // cached: IsDir is called without the lock
	readable bool
	writable bool
	append   bool
	closed   bool
	pos      int64

	// Directory listing state: names is the snapshot taken by the first
	// Readdir after open or rewind (nil until then), next indexes into it.
	names []string
	next  int
}

var _ experimentalsys.File = (*file)(nil)

// Dev implements sys.File.
func (h *file) Dev() (uint64, experimentalsys.Errno) { return h.fs.dev, 0 }

// Ino implements sys.File. Inode numbers never change, so no lock is needed.
func (h *file) Ino() (sys.Inode, experimentalsys.Errno) { return h.n.ino, 0 }

// IsDir implements sys.File.
func (h *file) IsDir() (bool, experimentalsys.Errno) { return h.dir, 0 }

// IsAppend implements sys.File.
func (h *file) IsAppend() bool {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	return h.append
}

// SetAppend implements sys.File.
func (h *file) SetAppend(enable bool) experimentalsys.Errno {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	switch {
	case h.closed:
		return experimentalsys.EBADF
	case h.n.isDir():
		return experimentalsys.EISDIR
	}
	h.append = enable
	return 0
}

// Stat implements sys.File.
func (h *file) Stat() (sys.Stat_t, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed {
		return sys.Stat_t{}, experimentalsys.EBADF
	}
	return h.n.stat(h.fs.dev), 0
}

// readErr is the errno for reading from h, zero when reading is allowed.
func (h *file) readErr() experimentalsys.Errno { return h.accessErr(h.readable) }

// writeErr is the errno for writing to h. A directory gives EISDIR, as
// wazero's own os-backed files report it.
func (h *file) writeErr() experimentalsys.Errno { return h.accessErr(h.writable) }

func (h *file) accessErr(allowed bool) experimentalsys.Errno {
	switch {
	case h.closed:
		return experimentalsys.EBADF
	case h.n.isDir():
		return experimentalsys.EISDIR
	case !allowed:
		return experimentalsys.EBADF
	}
	return 0
}

// Read implements sys.File.
func (h *file) Read(buf []byte) (int, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if errno := h.readErr(); errno != 0 {
		return 0, errno
	}
	n := h.n.readAt(buf, h.pos)
	h.pos += int64(n)
	return n, 0
}

// Pread implements sys.File.
func (h *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if errno := h.readErr(); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	return h.n.readAt(buf, off), 0
}

// seekOffset is int64. Spelling Seek's parameter through an alias keeps go
// vet's stdmethods check, which wants io.Seeker's error result, from flagging
// a method whose signature wazero's sys.File interface dictates.
type seekOffset = int64

// Seek implements sys.File. On a directory only a rewind is meaningful
// (wazero's fd_seek refuses directories before reaching here).
func (h *file) Seek(offset seekOffset, whence int) (int64, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed {
		return 0, experimentalsys.EBADF
	}
	if h.n.isDir() {
		if offset == 0 && whence == io.SeekStart {
			h.names, h.next = nil, 0
			return 0, 0
		}
		return 0, experimentalsys.EISDIR
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = h.pos
	case io.SeekEnd:
		base = h.n.size
	default:
		return 0, experimentalsys.EINVAL
	}
	if (offset > 0 && base > math.MaxInt64-offset) || base+offset < 0 {
		return 0, experimentalsys.EINVAL
	}
	h.pos = base + offset
	return h.pos, 0
}

// Readdir implements sys.File without "." and "..", which wazero adds.
func (h *file) Readdir(count int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed || !h.n.isDir() {
		return nil, experimentalsys.EBADF
	}
	if h.names == nil {
		h.names = make([]string, 0, len(h.n.children))
		for name := range h.n.children {
			h.names = append(h.names, name)
		}
		slices.Sort(h.names)
	}
	var out []experimentalsys.Dirent
	for h.next < len(h.names) && (count <= 0 || len(out) < count) {
		name := h.names[h.next]
		h.next++
		child := h.n.children[name]
		if child == nil {
			continue // removed since the snapshot
		}
		d := experimentalsys.Dirent{Name: name, Ino: child.ino}
		if child.isDir() {
			d.Type = fs.ModeDir
		}
		out = append(out, d)
	}
	return out, 0
}

// Write implements sys.File. See the package documentation for how a write
// that does not fit in the budget behaves.
func (h *file) Write(buf []byte) (int, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if errno := h.writeErr(); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	if h.append {
		h.pos = h.n.size
	}
	n, errno := h.fs.writeAt(h.n, buf, h.pos)
	h.pos += int64(n)
	return n, errno
}

// Pwrite implements sys.File. As POSIX requires (unlike Linux), the offset
// is honoured even in append mode.
func (h *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if errno := h.writeErr(); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	return h.fs.writeAt(h.n, buf, off)
}

// writeAt writes what fits of buf at off, charging any growth (including a
// hole before off). It returns a short count without error when only part
// fits, and ErrNoSpace when nothing does. Callers hold b.mu.
func (f *FS) writeAt(n *inode, buf []byte, off int64) (int, experimentalsys.Errno) {
	if off > math.MaxInt64-int64(len(buf)) {
		return 0, experimentalsys.EINVAL // Linux says EFBIG, which wazero lacks
	}
	end := off + int64(len(buf))
	if grow := end - n.size; grow > 0 {
		if avail := f.b.max - f.b.used; grow > avail {
			fit := n.size + avail - off
			if fit <= 0 {
				f.b.noSpace++
				return 0, ErrNoSpace
			}
			buf, end, grow = buf[:fit], off+fit, avail
		}
		f.b.used += grow
	}
	n.writeAt(buf, off)
	if end > n.size {
		n.size = end
	}
	now := f.b.nowNanos()
	n.mtim, n.ctim = now, now
	return len(buf), 0
}

// Truncate implements sys.File. Growing is all-or-nothing against the budget.
func (h *file) Truncate(size int64) experimentalsys.Errno {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	switch {
	case h.closed:
		return experimentalsys.EBADF
	case h.n.isDir():
		return experimentalsys.EISDIR
	case size < 0:
		return experimentalsys.EINVAL
	case !h.writable:
		return experimentalsys.EBADF
	}
	if grow := size - h.n.size; grow > 0 && !h.fs.b.charge(grow) {
		return ErrNoSpace
	}
	h.fs.b.used += min(size-h.n.size, 0) // return what a shrink frees
	h.n.setSize(size)
	now := h.fs.b.nowNanos()
	h.n.mtim, h.n.ctim = now, now
	return 0
}

// Sync implements sys.File; memory needs no flushing.
func (h *file) Sync() experimentalsys.Errno {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed {
		return experimentalsys.EBADF
	}
	return 0
}

// Datasync implements sys.File.
func (h *file) Datasync() experimentalsys.Errno { return h.Sync() }

// Utimens implements sys.File.
func (h *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed {
		return experimentalsys.EBADF
	}
	setTimes(h.n, atim, mtim, h.fs.b.nowNanos())
	return 0
}

// Close implements sys.File. It is idempotent; the last close of an
// unlinked inode returns its bytes to the budget.
func (h *file) Close() experimentalsys.Errno {
	h.fs.b.mu.Lock()
	defer h.fs.b.mu.Unlock()
	if h.closed {
		return 0
	}
	h.closed = true
	h.names = nil
	h.n.opens--
	h.fs.release(h.n)
	return 0
}
