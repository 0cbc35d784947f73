package memfs

import (
	"bytes"
	"io"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// fuzzPaths is a small namespace so random operations collide often.
var fuzzPaths = []string{"a", "b", "d", "d/a", "d/b", "d/e", "d/e/a", "e"}

// fuzzState drives two file systems on one budget and keeps a shadow copy
// of every file's contents, keyed by inode.
type fuzzState struct {
	t      *testing.T
	b      *Budget
	fss    [2]*FS
	slots  [8]*file
	shadow map[*inode][]byte
	seq    byte
}

// FuzzOps applies a random sequence of operations and after each one checks
// that Used() never exceeds the limit, that it equals the sizes of live files
// plus InodeCost per live inode, that the inode count agrees, and that every
// live file reads back exactly what was written to it.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0x07, 2, 0, 200, 4, 0, 10, 1, 0})
	f.Add([]byte{8, 2, 0, 3, 0x07, 2, 3, 255, 7, 3, 9, 2, 1, 3})
	f.Add([]byte{0, 1, 0x07, 3, 1, 255, 255, 250, 5, 1, 0, 0, 7, 1, 2, 1, 1, 1})
	f.Add([]byte{8, 2, 8, 5, 0, 6, 0x07, 10, 2, 7, 10, 2, 0, 11, 0, 9, 5})
	f.Add(bytes.Repeat([]byte{0, 0, 0x0f, 2, 0, 255, 3, 0, 100, 200, 180}, 8))
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := &fuzzState{t: t, b: NewBudget(pageSize+pageSize/2+4*InodeCost, WithMaxInodes(6)), shadow: map[*inode][]byte{}}
		s.fss = [2]*FS{s.b.NewFS(), s.b.NewFS()}
		for len(ops) > 0 {
			ops = s.step(ops)
			s.check()
		}
		for i := range s.slots {
			s.closeSlot(i)
		}
		s.check()
	})
}

// next pops one byte, zero when the input is exhausted.
func next(ops *[]byte) byte {
	if len(*ops) == 0 {
		return 0
	}
	b := (*ops)[0]
	*ops = (*ops)[1:]
	return b
}

func (s *fuzzState) pattern(n int) []byte {
	s.seq++
	p := make([]byte, n)
	for i := range p {
		p[i] = s.seq + byte(i*7)
	}
	return p
}

func (s *fuzzState) closeSlot(i int) {
	if h := s.slots[i]; h != nil {
		if errno := h.Close(); errno != 0 {
			s.t.Fatalf("close: %v", errno)
		}
		s.slots[i] = nil
	}
}

func (s *fuzzState) step(ops []byte) []byte {
	op := next(&ops) % 13
	fsys := s.fss[next(&ops)%2]
	slot := int(next(&ops) % 8)
	h := s.slots[slot]
	switch op {
	case 0: // open
		flags := next(&ops)
		fl := []experimentalsys.Oflag{rdonly, wronly, rdwr, rdwr}[flags&3]
		if flags&4 != 0 {
			fl |= creat
		}
		if flags&8 != 0 {
			fl |= excl
		}
		if flags&16 != 0 {
			fl |= trunc
		}
		if flags&32 != 0 {
			fl |= appnd
		}
		f, errno := fsys.OpenFile(fuzzPaths[flags>>5%8], fl, 0o644)
		if errno == 0 {
			s.closeSlot(slot)
			s.slots[slot] = f.(*file)
			if fl&trunc != 0 && !s.slots[slot].n.isDir() {
				s.shadow[s.slots[slot].n] = nil
			}
		}
	case 1:
		s.closeSlot(slot)
	case 2, 3: // write, pwrite
		size := int(next(&ops)) * 157
		if h == nil {
			return ops
		}
		data := s.pattern(size)
		var off int64
		var n int
		var errno experimentalsys.Errno
		if op == 2 {
			off = h.pos
			if h.append {
				off = h.n.size
			}
			n, errno = h.Write(data)
		} else {
			off = int64(next(&ops))<<9 | int64(next(&ops))
			n, errno = h.Pwrite(data, off)
		}
		if errno == 0 && n < len(data) && s.b.Used() != s.b.Max() {
			s.t.Fatalf("short write (%d of %d) with budget left: %+v", n, len(data), s.b.Stats())
		}
		if errno == ErrNoSpace && n != 0 {
			s.t.Fatalf("ErrNoSpace together with a count %d; wazero would drop it", n)
		}
		if n > 0 {
			sh := s.shadow[h.n]
			if end := int(off) + n; end > len(sh) {
				sh = append(sh, make([]byte, end-len(sh))...)
			}
			copy(sh[off:], data[:n])
			s.shadow[h.n] = sh
		}
	case 4: // truncate
		size := int64(next(&ops))<<9 | int64(next(&ops))
		if h != nil && h.Truncate(size) == 0 {
			sh := s.shadow[h.n]
			if int(size) <= len(sh) {
				sh = sh[:size]
			} else {
				sh = append(sh, make([]byte, int(size)-len(sh))...)
			}
			s.shadow[h.n] = sh
		}
	case 5: // read at the current position
		size := int(next(&ops)) * 131
		if h == nil || !h.readable || h.n.isDir() {
			return ops
		}
		pos := h.pos
		buf := make([]byte, size)
		n, errno := h.Read(buf)
		if errno != 0 {
			s.t.Fatalf("read: %v", errno)
		}
		sh := s.shadow[h.n]
		want := 0
		if pos < int64(len(sh)) {
			want = min(size, len(sh)-int(pos))
		}
		if n != want || (n > 0 && !bytes.Equal(buf[:n], sh[pos:pos+int64(n)])) {
			s.t.Fatalf("read at %d: got %d bytes, want %d (or contents differ)", pos, n, want)
		}
	case 6: // seek
		off := int64(int8(next(&ops))) * 1000
		whence := int(next(&ops) % 3)
		if h != nil && !h.n.isDir() {
			_, _ = h.Seek(off, whence)
		}
	case 7:
		_ = fsys.Unlink(fuzzPaths[next(&ops)%8])
	case 8:
		_ = fsys.Mkdir(fuzzPaths[next(&ops)%8], 0o755)
	case 9:
		_ = fsys.Rmdir(fuzzPaths[next(&ops)%8])
	case 10:
		_ = fsys.Rename(fuzzPaths[next(&ops)%8], fuzzPaths[next(&ops)%8])
	case 11: // readdir
		if h != nil && h.n.isDir() {
			if next(&ops)%2 == 0 {
				_, _ = h.Seek(0, io.SeekStart)
			}
			ents, errno := h.Readdir(int(next(&ops) % 4))
			if errno != 0 {
				s.t.Fatalf("readdir: %v", errno)
			}
			for _, e := range ents {
				if h.n.children[e.Name] == nil {
					s.t.Fatalf("readdir returned removed entry %q", e.Name)
				}
			}
		}
	case 12:
		if h != nil && !h.n.isDir() {
			_ = h.SetAppend(next(&ops)%2 == 0)
		}
	}
	return ops
}

// check recomputes the budget from the trees and open handles.
func (s *fuzzState) check() {
	live := map[*inode]bool{}
	var walk func(d *inode)
	walk = func(d *inode) {
		for _, c := range d.children {
			live[c] = true
			if c.isDir() {
				if c.parent != d {
					s.t.Fatalf("inode %d: parent pointer is stale", c.ino)
				}
				walk(c)
			}
		}
	}
	for _, f := range s.fss {
		walk(f.root)
	}
	for _, h := range s.slots {
		if h != nil {
			live[h.n] = true
		}
	}
	var used int64
	for n := range live {
		if n.released {
			s.t.Fatalf("inode %d is reachable but released", n.ino)
		}
		used += n.size + InodeCost
		if !n.isDir() {
			for i, p := range n.pages {
				if int64(i)*pageSize+int64(len(p)) > n.size {
					s.t.Fatalf("inode %d: page %d reaches past size %d", n.ino, i, n.size)
				}
			}
			got := make([]byte, n.size)
			n.readAt(got, 0)
			sh := s.shadow[n]
			if len(sh) != int(n.size) || !bytes.Equal(got, sh) {
				s.t.Fatalf("inode %d: contents differ from what was written (size %d, shadow %d)", n.ino, n.size, len(sh))
			}
		}
	}
	for n := range s.shadow {
		if !live[n] {
			delete(s.shadow, n) // freed; its charge must be gone too (checked below)
		}
	}
	st := s.b.Stats()
	if st.Used > st.Max {
		s.t.Fatalf("used %d exceeds max %d", st.Used, st.Max)
	}
	if st.Used != used || st.Inodes != len(live) {
		s.t.Fatalf("budget says used=%d inodes=%d; live inodes sum to used=%d inodes=%d", st.Used, st.Inodes, used, len(live))
	}
	if st.Inodes > st.MaxInodes {
		s.t.Fatalf("inodes %d exceed the cap %d", st.Inodes, st.MaxInodes)
	}
}
