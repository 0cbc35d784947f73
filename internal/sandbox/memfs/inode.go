package memfs

import (
	"io/fs"

	"github.com/tetratelabs/wazero/sys"
)

// pageSize splits file contents so that a large file never needs one huge
// reallocation and a sparse file allocates nothing for its holes.
const pageSize = 64 << 10

// inode is a file or a directory. All fields are guarded by the Budget mutex.
type inode struct {
	ino  uint64
	mode fs.FileMode // type bits and permission bits

	atim, mtim, ctim int64

	// nlink is 1 while the inode has a name, 0 once unlinked or removed.
	nlink int
	// opens counts handles; with nlink it decides when the inode is freed.
	opens int
	// released is set once the inode's charge has been returned.
	released bool

	// Regular files. Invariant: for every page i, i*pageSize+len(pages[i])
	// <= size; bytes not backed by a page read as zero.
	size  int64
	pages [][]byte

	// Directories.
	parent   *inode
	children map[string]*inode
	subdirs  int
}

func (n *inode) isDir() bool { return n.mode.IsDir() }

func (n *inode) stat(dev uint64) sys.Stat_t {
	st := sys.Stat_t{
		Dev:   dev,
		Ino:   n.ino,
		Mode:  n.mode,
		Nlink: uint64(n.nlink),
		Size:  n.size,
		Atim:  n.atim,
		Mtim:  n.mtim,
		Ctim:  n.ctim,
	}
	if n.isDir() && n.nlink > 0 {
		st.Nlink = uint64(2 + n.subdirs) // "." and the entry in the parent, as on Linux
	}
	return st
}

// readAt copies file bytes at off into buf and returns how many it copied.
func (n *inode) readAt(buf []byte, off int64) int {
	if off >= n.size {
		return 0
	}
	if rest := n.size - off; int64(len(buf)) > rest {
		buf = buf[:rest]
	}
	total := len(buf)
	for len(buf) > 0 {
		pi, po := int(off/pageSize), int(off%pageSize)
		m := min(len(buf), pageSize-po)
		var page []byte
		if pi < len(n.pages) {
			page = n.pages[pi]
		}
		c := 0
		if po < len(page) {
			c = copy(buf[:m], page[po:])
		}
		clear(buf[c:m])
		buf = buf[m:]
		off += int64(m)
	}
	return total
}

// writeAt stores buf at off. The caller has already charged any growth and
// updates size afterwards.
func (n *inode) writeAt(buf []byte, off int64) {
	for len(buf) > 0 {
		pi, po := int(off/pageSize), int(off%pageSize)
		m := min(len(buf), pageSize-po)
		if pi >= len(n.pages) {
			n.pages = append(n.pages, make([][]byte, pi+1-len(n.pages))...)
		}
		page := n.pages[pi]
		if need := po + m; need > len(page) {
			page = growPage(page, need, pi > 0)
			n.pages[pi] = page
		}
		copy(page[po:], buf[:m])
		buf = buf[m:]
		off += int64(m)
	}
}

// growPage extends page to need bytes, zeroing the new part. The first page
// grows geometrically so small files stay small; later pages exist only in
// files already larger than a page, so they are allocated whole at once.
func growPage(page []byte, need int, whole bool) []byte {
	old := len(page)
	if need <= cap(page) {
		page = page[:need]
		clear(page[old:]) // may hold bytes from before a shrinking truncate
		return page
	}
	c := pageSize
	if !whole {
		c = min(pageSize, max(need, 2*cap(page), 64))
	}
	grown := make([]byte, need, c)
	copy(grown, page)
	return grown
}

// setSize changes the size, dropping pages past the new end. The caller
// settles the budget.
func (n *inode) setSize(size int64) {
	if size < n.size {
		keep := int((size + pageSize - 1) / pageSize)
		if keep == 0 {
			n.pages = nil
		} else if keep <= len(n.pages) {
			clear(n.pages[keep:]) // let the dropped pages be collected
			n.pages = n.pages[:keep]
			last := keep - 1
			if lim := int(size - int64(last)*pageSize); len(n.pages[last]) > lim {
				n.pages[last] = n.pages[last][:lim]
			}
		}
	}
	n.size = size
}
