package memfs

import (
	"slices"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// FuzzAgainstDirFS replays random operation sequences on memfs and on
// wazero's DirFS over a host temporary directory, and requires the same
// errno from both at every step and the same tree at the end. The budget is
// large enough never to bind, and link operations are left out (supported
// on the host, refused here).
func FuzzAgainstDirFS(f *testing.F) {
	f.Add([]byte{0, 0, 0x04, 2, 0, 9, 3, 1, 6, 2, 5, 3, 4})
	f.Add([]byte{5, 2, 5, 5, 0, 1, 0x64, 6, 2, 7, 2, 4, 2, 3, 8, 2})
	f.Add([]byte{5, 2, 0, 0, 0x6c, 7, 5, 7, 2, 3, 3, 2, 1, 6, 5})
	f.Add([]byte{0, 3, 0x16, 2, 3, 200, 4, 3, 7, 6, 3, 5, 1, 3, 8, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		mem := New(1 << 30)
		ref := sysfs.DirFS(t.TempDir())
		var memH, refH [4]experimentalsys.File
		t.Cleanup(func() {
			for i := range refH {
				if refH[i] != nil {
					refH[i].Close()
				}
			}
		})
		for step := 0; len(ops) > 0; step++ {
			op := next(&ops) % 10
			slot := int(next(&ops) % 4)
			p := fuzzPaths[next(&ops)%8]
			var em, er experimentalsys.Errno
			switch op {
			case 0: // open
				flags := next(&ops)
				fl := []experimentalsys.Oflag{rdonly, wronly, rdwr, rdonly}[flags&3]
				if flags&4 != 0 {
					fl |= creat
				}
				if flags&8 != 0 {
					fl |= excl
				}
				if flags&16 != 0 {
					fl |= trunc
				}
				if flags&32 != 0 && fl&creat == 0 {
					fl |= dirf // O_CREAT|O_DIRECTORY depends on the kernel version
				}
				var fm, fr experimentalsys.File
				fm, em = mem.OpenFile(p, fl, 0o644)
				fr, er = ref.OpenFile(p, fl, 0o644)
				if fm != nil {
					if memH[slot] != nil {
						memH[slot].Close()
					}
					memH[slot] = fm
				}
				if fr != nil {
					if refH[slot] != nil {
						refH[slot].Close()
					}
					refH[slot] = fr
				}
			case 1: // write
				data := []byte("0123456789abcdef")[:next(&ops)%17]
				if memH[slot] == nil || refH[slot] == nil {
					continue
				}
				var nm, nr int
				nm, em = memH[slot].Write(data)
				nr, er = refH[slot].Write(data)
				if nm != nr {
					t.Fatalf("step %d write: memfs wrote %d, dirfs %d", step, nm, nr)
				}
				if len(data) == 0 {
					// DirFS returns success for empty writes before checking the
					// descriptor; memfs checks first, as Linux write(2) does.
					er = em
				}
			case 2: // truncate
				size := int64(next(&ops) % 40)
				if memH[slot] == nil || refH[slot] == nil {
					continue
				}
				em, er = memH[slot].Truncate(size), refH[slot].Truncate(size)
				if em == experimentalsys.EBADF && er == experimentalsys.EINVAL {
					er = em // read-only descriptor: see TestHandleErrnos
				}
			case 3:
				em, er = mem.Unlink(p), ref.Unlink(p)
			case 4:
				em, er = mem.Mkdir(p, 0o755), ref.Mkdir(p, 0o755)
				if em == experimentalsys.ENOTDIR && er == experimentalsys.ENOENT {
					er = em // DirFS rewrites ENOTDIR; see TestPathErrnos
				}
			case 5:
				em, er = mem.Rmdir(p), ref.Rmdir(p)
			case 6:
				to := fuzzPaths[next(&ops)%8]
				em, er = mem.Rename(p, to), ref.Rename(p, to)
				if p == to {
					er = em // DirFS answers success for from == to without looking
				}
			case 7: // stat
				var sm, sr sys.Stat_t
				sm, em = mem.Stat(p)
				sr, er = ref.Stat(p)
				if em == 0 && er == 0 && (sm.Mode.Type() != sr.Mode.Type() || (!sm.Mode.IsDir() && sm.Size != sr.Size)) {
					t.Fatalf("step %d stat %s: memfs %v/%d, dirfs %v/%d", step, p, sm.Mode, sm.Size, sr.Mode, sr.Size)
				}
			case 8: // close
				if memH[slot] != nil {
					memH[slot].Close()
					memH[slot] = nil
				}
				if refH[slot] != nil {
					refH[slot].Close()
					refH[slot] = nil
				}
			case 9: // pread of the whole handle
				if memH[slot] == nil || refH[slot] == nil {
					continue
				}
				bm, br := make([]byte, 64), make([]byte, 64)
				var nm, nr int
				nm, em = memH[slot].Pread(bm, 0)
				nr, er = refH[slot].Pread(br, 0)
				if string(bm[:nm]) != string(br[:nr]) {
					t.Fatalf("step %d pread: memfs %q, dirfs %q", step, bm[:nm], br[:nr])
				}
			}
			if em != er {
				t.Fatalf("step %d op %d on %s: memfs %v, dirfs %v", step, op, p, em, er)
			}
		}
		if got, want := treeOf(t, mem), treeOf(t, ref); !slices.Equal(got, want) {
			t.Fatalf("trees differ\nmemfs: %q\ndirfs: %q", got, want)
		}
	})
}

// treeOf lists every path under the fixed namespace with its type and
// contents.
func treeOf(t *testing.T, fsys experimentalsys.FS) []string {
	t.Helper()
	var out []string
	for _, p := range fuzzPaths {
		st, errno := fsys.Stat(p)
		if errno != 0 {
			continue
		}
		if st.Mode.IsDir() {
			out = append(out, p+"/")
			continue
		}
		out = append(out, p+"="+readAll(t, fsys, p))
	}
	return out
}
