package memfs

import (
	"io/fs"
	"strings"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// FS is one in-memory tree implementing wazero's experimental sys.FS.
type FS struct {
	experimentalsys.UnimplementedFS

	b       *Budget
	dev     uint64
	root    *inode
	lastIno uint64
}

var _ experimentalsys.FS = (*FS)(nil)

// Mount adds f to cfg at guestPath and returns the new configuration. The
// configuration must come from wazero.NewFSConfig, whose implementation
// accepts sys.FS mounts.
func Mount(cfg wazero.FSConfig, guestPath string, f *FS) wazero.FSConfig {
	return cfg.(sysfs.FSConfig).WithSysFSMount(f, guestPath)
}

// Budget returns the budget f is charged to.
func (f *FS) Budget() *Budget { return f.b }

// Used returns the bytes charged to f's budget, by f and any FS sharing it.
func (f *FS) Used() int64 { return f.b.Used() }

// newInode makes an inode without charging for it. Callers hold b.mu.
func (f *FS) newInode(dir bool, perm fs.FileMode, now int64) *inode {
	f.lastIno++
	n := &inode{ino: f.lastIno, mode: perm & fs.ModePerm, atim: now, mtim: now, ctim: now}
	if dir {
		n.mode |= fs.ModeDir
		n.children = map[string]*inode{}
	}
	return n
}

// release returns an inode's charge once it has neither a name nor an open
// handle. Callers hold b.mu.
func (f *FS) release(n *inode) {
	if n.nlink > 0 || n.opens > 0 || n.released || n == f.root {
		return
	}
	n.released = true
	f.b.used -= n.size + InodeCost
	f.b.inodes--
	n.pages = nil
}

// resolved is a path looked up in the tree.
type resolved struct {
	parent *inode // nil for the root
	name   string // last component; empty for the root
	node   *inode // nil when the last component does not exist
	dirs   bool   // the path ended in a slash, so it must name a directory
}

// resolve walks p, relative to the root whether or not it starts with "/".
// wazero hands over cleaned paths, but joins them to the name of an open
// directory for *at calls on non-preopened descriptors, so doubled slashes
// and leading slashes do occur. "." components are skipped and ".." climbs
// lexically, never above the root. Callers hold b.mu.
func (f *FS) resolve(p string) (resolved, experimentalsys.Errno) {
	r := resolved{dirs: strings.HasSuffix(p, "/")}
	var names []string
	for part := range strings.SplitSeq(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if len(names) > 0 {
				names = names[:len(names)-1]
			}
		default:
			if len(part) > MaxNameLen {
				return r, experimentalsys.ENAMETOOLONG
			}
			names = append(names, part)
		}
	}
	if len(names) == 0 {
		r.node = f.root
		return r, 0
	}
	dir := f.root
	for _, name := range names[:len(names)-1] {
		next := dir.children[name]
		if next == nil {
			return r, experimentalsys.ENOENT
		}
		if !next.isDir() {
			return r, experimentalsys.ENOTDIR
		}
		dir = next
	}
	r.parent, r.name = dir, names[len(names)-1]
	r.node = dir.children[r.name]
	if r.dirs && r.node != nil && !r.node.isDir() {
		return r, experimentalsys.ENOTDIR
	}
	return r, 0
}

// touchDir records a change of a directory's entries.
func touchDir(d *inode, now int64) {
	d.mtim, d.ctim = now, now
}

// link adds n to dir under name.
func link(dir *inode, name string, n *inode) {
	dir.children[name] = n
	n.nlink = 1
	if n.isDir() {
		n.parent = dir
		dir.subdirs++
	}
}

// unlink removes name from dir; the caller releases the inode if unused.
func unlink(dir *inode, name string, n *inode) {
	delete(dir.children, name)
	n.nlink = 0
	if n.isDir() {
		dir.subdirs--
	}
}

// OpenFile implements sys.FS. perm applies only when a file is created.
func (f *FS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	acc := flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY)
	if acc == experimentalsys.O_RDWR|experimentalsys.O_WRONLY {
		return nil, experimentalsys.EINVAL
	}
	readable := acc != experimentalsys.O_WRONLY
	writable := acc != experimentalsys.O_RDONLY

	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return nil, errno
	}
	now := f.b.nowNanos()
	n := r.node
	switch {
	case n == nil:
		if flag&experimentalsys.O_CREAT == 0 {
			return nil, experimentalsys.ENOENT
		}
		if r.dirs {
			return nil, experimentalsys.EISDIR // Linux: open("new/", O_CREAT)
		}
		if flag&experimentalsys.O_DIRECTORY != 0 {
			return nil, experimentalsys.EINVAL // Linux refuses O_CREAT|O_DIRECTORY
		}
		if !f.b.chargeInode() {
			return nil, ErrNoSpace
		}
		n = f.newInode(false, perm, now)
		link(r.parent, r.name, n)
		touchDir(r.parent, now)
	case flag&(experimentalsys.O_CREAT|experimentalsys.O_EXCL) == experimentalsys.O_CREAT|experimentalsys.O_EXCL:
		return nil, experimentalsys.EEXIST
	case n.isDir():
		if writable || flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC) != 0 {
			return nil, experimentalsys.EISDIR
		}
	default:
		if flag&experimentalsys.O_DIRECTORY != 0 {
			return nil, experimentalsys.ENOTDIR
		}
		// Linux truncates even with O_RDONLY; wasi-libc never asks for that.
		if flag&experimentalsys.O_TRUNC != 0 {
			if n.size > 0 {
				f.b.used -= n.size
				n.setSize(0)
			}
			n.mtim, n.ctim = now, now
		}
	}
	n.opens++
	return &file{
		fs:       f,
		n:        n,
		dir:      n.isDir(),
		readable: readable,
		writable: writable,
		append:   flag&experimentalsys.O_APPEND != 0,
	}, 0
}

// Lstat implements sys.FS. There are no symbolic links, so it is Stat.
func (f *FS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	return f.Stat(path)
}

// Stat implements sys.FS.
func (f *FS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return sys.Stat_t{}, errno
	}
	if r.node == nil {
		return sys.Stat_t{}, experimentalsys.ENOENT
	}
	return r.node.stat(f.dev), 0
}

// Mkdir implements sys.FS.
func (f *FS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return errno
	}
	if r.node != nil {
		return experimentalsys.EEXIST
	}
	if !f.b.chargeInode() {
		return ErrNoSpace
	}
	now := f.b.nowNanos()
	link(r.parent, r.name, f.newInode(true, perm, now))
	touchDir(r.parent, now)
	return 0
}

// Chmod implements sys.FS. The bits are stored and reported, not enforced.
func (f *FS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return errno
	}
	if r.node == nil {
		return experimentalsys.ENOENT
	}
	r.node.mode = r.node.mode&^fs.ModePerm | perm&fs.ModePerm
	r.node.ctim = f.b.nowNanos()
	return 0
}

// Rename implements sys.FS with rename(2) semantics, replacing an existing
// target of a compatible type.
func (f *FS) Rename(from, to string) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	src, errno := f.resolve(from)
	if errno != 0 {
		return errno
	}
	dst, errno := f.resolve(to)
	if errno != 0 {
		return errno
	}
	n := src.node
	if n == nil {
		return experimentalsys.ENOENT
	}
	if n == f.root || dst.parent == nil {
		return experimentalsys.EINVAL // Linux says EBUSY, which wazero cannot carry
	}
	if dst.node == n {
		return 0 // same file: POSIX says do nothing
	}
	if !n.isDir() && dst.dirs {
		return experimentalsys.ENOTDIR
	}
	if n.isDir() {
		for d := dst.parent; d != nil; d = d.parent {
			if d == n {
				return experimentalsys.EINVAL // into its own subtree
			}
		}
	}
	now := f.b.nowNanos()
	if old := dst.node; old != nil {
		switch {
		case n.isDir() && !old.isDir():
			return experimentalsys.ENOTDIR
		case !n.isDir() && old.isDir():
			return experimentalsys.EISDIR
		case old.isDir() && len(old.children) > 0:
			return experimentalsys.ENOTEMPTY
		}
		unlink(dst.parent, dst.name, old)
		old.ctim = now
		f.release(old)
	}
	unlink(src.parent, src.name, n)
	link(dst.parent, dst.name, n)
	n.ctim = now
	touchDir(src.parent, now)
	touchDir(dst.parent, now)
	return 0
}

// Rmdir implements sys.FS.
func (f *FS) Rmdir(path string) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return errno
	}
	n := r.node
	switch {
	case n == nil:
		return experimentalsys.ENOENT
	case n == f.root:
		return experimentalsys.EINVAL // Linux: rmdir(".") is EINVAL, rmdir("/") EBUSY
	case !n.isDir():
		return experimentalsys.ENOTDIR
	case len(n.children) > 0:
		return experimentalsys.ENOTEMPTY
	}
	f.remove(r)
	return 0
}

// remove takes r's node out of its directory; open handles keep it alive
// until closed. Callers hold b.mu.
func (f *FS) remove(r resolved) {
	n := r.node
	now := f.b.nowNanos()
	unlink(r.parent, r.name, n)
	n.ctim = now
	touchDir(r.parent, now)
	f.release(n)
}

// Unlink implements sys.FS. Open handles keep the data until closed.
func (f *FS) Unlink(path string) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return errno
	}
	n := r.node
	switch {
	case n == nil:
		return experimentalsys.ENOENT
	case n.isDir():
		return experimentalsys.EISDIR // Linux; POSIX also allows EPERM
	}
	f.remove(r)
	return 0
}

// Link implements sys.FS: hard links are not supported (EPERM, as a Linux
// file system without them answers).
func (f *FS) Link(oldPath, _ string) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(oldPath)
	if errno != 0 {
		return errno
	}
	if r.node == nil {
		return experimentalsys.ENOENT
	}
	return experimentalsys.EPERM
}

// Symlink implements sys.FS: symbolic links are not supported.
func (f *FS) Symlink(_, linkName string) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(linkName)
	if errno != 0 {
		return errno
	}
	if r.node != nil {
		return experimentalsys.EEXIST
	}
	return experimentalsys.EPERM
}

// Readlink implements sys.FS. Nothing is a link, so existing paths are
// EINVAL as readlink(2) says for non-links.
func (f *FS) Readlink(path string) (string, experimentalsys.Errno) {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return "", errno
	}
	if r.node == nil {
		return "", experimentalsys.ENOENT
	}
	return "", experimentalsys.EINVAL
}

// Utimens implements sys.FS.
func (f *FS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	r, errno := f.resolve(path)
	if errno != 0 {
		return errno
	}
	if r.node == nil {
		return experimentalsys.ENOENT
	}
	setTimes(r.node, atim, mtim, f.b.nowNanos())
	return 0
}

func setTimes(n *inode, atim, mtim, now int64) {
	if atim != experimentalsys.UTIME_OMIT {
		n.atim = atim
	}
	if mtim != experimentalsys.UTIME_OMIT {
		n.mtim = mtim
	}
	n.ctim = now
}
