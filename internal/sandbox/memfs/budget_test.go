package memfs

import (
	"strings"
	"sync"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

func openRW(t *testing.T, fsys *FS, name string) experimentalsys.File {
	t.Helper()
	f, errno := fsys.OpenFile(name, rdwr|creat, 0o644)
	must(t, errno)
	return f
}

func wantUsed(t *testing.T, fsys *FS, want int64) {
	t.Helper()
	if got := fsys.Used(); got != want {
		t.Fatalf("Used() = %d, want %d", got, want)
	}
}

func TestBudgetWrites(t *testing.T) {
	const room = 100 // bytes of content that fit after one inode
	tests := []struct {
		name      string
		run       func(experimentalsys.File) (int, experimentalsys.Errno)
		wantN     int
		wantErrno experimentalsys.Errno
		wantSize  int64
	}{
		{"exactly fits", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return f.Write(make([]byte, room))
		}, room, 0, room},
		{"one byte over writes what fits", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return f.Write(make([]byte, room+1))
		}, room, 0, room},
		{"pwrite hole fills budget exactly: nothing fits", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return f.Pwrite([]byte("x"), room)
		}, 0, ErrNoSpace, 0},
		{"pwrite hole leaves one byte", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return f.Pwrite([]byte("xyz"), room-1)
		}, 1, 0, room},
		{"pwrite far beyond", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return f.Pwrite([]byte("x"), 1<<40)
		}, 0, ErrNoSpace, 0},
		{"truncate to the limit", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return 0, f.Truncate(room)
		}, 0, 0, room},
		{"truncate past the limit is all-or-nothing", func(f experimentalsys.File) (int, experimentalsys.Errno) {
			return 0, f.Truncate(room + 1)
		}, 0, ErrNoSpace, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := New(InodeCost + room)
			f := openRW(t, fsys, "f")
			defer f.Close()
			n, errno := tc.run(f)
			if n != tc.wantN || errno != tc.wantErrno {
				t.Fatalf("got (%d, %v), want (%d, %v)", n, errno, tc.wantN, tc.wantErrno)
			}
			st, _ := f.Stat()
			if st.Size != tc.wantSize {
				t.Fatalf("size %d, want %d", st.Size, tc.wantSize)
			}
			wantUsed(t, fsys, InodeCost+tc.wantSize)
			wantRefusals := int64(0)
			if errno == ErrNoSpace {
				wantRefusals = 1
			}
			if got := fsys.Budget().Stats().NoSpace; got != wantRefusals {
				t.Fatalf("NoSpace = %d, want %d", got, wantRefusals)
			}
			if errno == 0 && fsys.Used() == fsys.Budget().Max() {
				// Full: the next growing write fails, overwriting does not.
				if n, errno := f.Pwrite([]byte("y"), tc.wantSize); n != 0 || errno != ErrNoSpace {
					t.Fatalf("write when full = (%d, %v)", n, errno)
				}
				if n, errno := f.Pwrite([]byte("y"), 0); n != 1 || errno != 0 {
					t.Fatalf("overwrite when full = (%d, %v)", n, errno)
				}
			}
		})
	}
}

func TestBudgetReturned(t *testing.T) {
	t.Run("unlink", func(t *testing.T) {
		fsys := New(1 << 20)
		writeFile(t, fsys, "f", strings.Repeat("a", 1000))
		wantUsed(t, fsys, InodeCost+1000)
		must(t, fsys.Unlink("f"))
		wantUsed(t, fsys, 0)
	})
	t.Run("truncate and O_TRUNC", func(t *testing.T) {
		fsys := New(1 << 20)
		f := openRW(t, fsys, "f")
		writeAll(t, f, strings.Repeat("a", 3*pageSize))
		must(t, f.Truncate(10))
		wantUsed(t, fsys, InodeCost+10)
		f.Close()
		f, errno := fsys.OpenFile("f", wronly|trunc, 0)
		must(t, errno)
		f.Close()
		wantUsed(t, fsys, InodeCost)
	})
	t.Run("unlinked file is charged until its last handle closes", func(t *testing.T) {
		fsys := New(1 << 20)
		writeFile(t, fsys, "f", "12345")
		f1, _ := fsys.OpenFile("f", rdonly, 0)
		f2, _ := fsys.OpenFile("f", rdwr, 0)
		must(t, fsys.Unlink("f"))
		wantUsed(t, fsys, InodeCost+5)
		writeAll(t, f2, "1234567") // still growable through the handle
		wantUsed(t, fsys, InodeCost+7)
		f1.Close()
		wantUsed(t, fsys, InodeCost+7)
		f2.Close()
		wantUsed(t, fsys, 0)
		f2.Close() // idempotent: must not return the charge twice
		wantUsed(t, fsys, 0)
		if got := fsys.Budget().Stats().Inodes; got != 0 {
			t.Fatalf("inodes %d", got)
		}
	})
	t.Run("rename over a file", func(t *testing.T) {
		fsys := New(1 << 20)
		writeFile(t, fsys, "a", "aa")
		writeFile(t, fsys, "b", "bbbb")
		must(t, fsys.Rename("a", "b"))
		wantUsed(t, fsys, InodeCost+2)
	})
	t.Run("rename over an open file", func(t *testing.T) {
		fsys := New(1 << 20)
		writeFile(t, fsys, "a", "aa")
		writeFile(t, fsys, "b", "bbbb")
		f, _ := fsys.OpenFile("b", rdonly, 0)
		must(t, fsys.Rename("a", "b"))
		wantUsed(t, fsys, 2*InodeCost+6)
		f.Close()
		wantUsed(t, fsys, InodeCost+2)
	})
	t.Run("rmdir and rename over empty dir", func(t *testing.T) {
		fsys := New(1 << 20)
		must(t, fsys.Mkdir("d", 0o755))
		must(t, fsys.Mkdir("e", 0o755))
		wantUsed(t, fsys, 2*InodeCost)
		must(t, fsys.Rename("d", "e"))
		wantUsed(t, fsys, InodeCost)
		d, _ := fsys.OpenFile("e", rdonly, 0)
		must(t, fsys.Rmdir("e"))
		wantUsed(t, fsys, InodeCost) // open directory handle
		if ents, errno := d.Readdir(-1); errno != 0 || len(ents) != 0 {
			t.Fatalf("readdir of removed dir = %v, %v", ents, errno)
		}
		d.Close()
		wantUsed(t, fsys, 0)
	})
}

func TestInodeLimits(t *testing.T) {
	t.Run("count cap", func(t *testing.T) {
		fsys := New(1<<20, WithMaxInodes(3))
		writeFile(t, fsys, "a", "")
		must(t, fsys.Mkdir("d", 0o755))
		writeFile(t, fsys, "d/b", "")
		if _, errno := fsys.OpenFile("c", rdwr|creat, 0o644); errno != ErrNoSpace {
			t.Fatalf("create past the inode cap: %v", errno)
		}
		if errno := fsys.Mkdir("e", 0o755); errno != ErrNoSpace {
			t.Fatalf("mkdir past the inode cap: %v", errno)
		}
		if err := fsys.WriteFile("c", nil, 0o644); err == nil {
			t.Fatal("WriteFile past the inode cap succeeded")
		}
		must(t, fsys.Unlink("a"))
		writeFile(t, fsys, "c", "")
		st := fsys.Budget().Stats()
		if st.Inodes != 3 || st.MaxInodes != 3 || st.NoSpace != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("inode cost", func(t *testing.T) {
		fsys := New(2*InodeCost + 10)
		writeFile(t, fsys, "a", "")
		must(t, fsys.Mkdir("d", 0o755))
		if _, errno := fsys.OpenFile("b", rdwr|creat, 0o644); errno != ErrNoSpace {
			t.Fatalf("create without room for an inode: %v", errno)
		}
		wantUsed(t, fsys, 2*InodeCost)
	})
	t.Run("name length", func(t *testing.T) {
		fsys := New(1 << 20)
		writeFile(t, fsys, strings.Repeat("n", MaxNameLen), "")
		if errno := fsys.Mkdir(strings.Repeat("n", MaxNameLen+1), 0o755); errno != experimentalsys.ENAMETOOLONG {
			t.Fatalf("long name: %v", errno)
		}
	})
}

func TestSharedBudget(t *testing.T) {
	b := NewBudget(2*InodeCost + 100)
	tmp, data := b.NewFS(), b.NewFS()
	f := openRW(t, tmp, "t")
	defer f.Close()
	writeAll(t, f, strings.Repeat("t", 60))
	g := openRW(t, data, "d")
	defer g.Close()
	if n, errno := g.Write(make([]byte, 60)); n != 40 || errno != 0 {
		t.Fatalf("second mount write = (%d, %v), want the 40 bytes left", n, errno)
	}
	if tmp.Used() != b.Max() || data.Used() != b.Max() {
		t.Fatalf("used %d/%d of %d", tmp.Used(), data.Used(), b.Max())
	}
	must(t, f.Truncate(0))
	writeAll(t, g, strings.Repeat("d", 60))
	if _, errno := tmp.Stat("d"); errno != experimentalsys.ENOENT {
		t.Fatalf("mounts share a namespace: %v", errno)
	}
}

// TestConcurrentStats runs guest-like writes while the host reads stats;
// it is meaningful under -race.
func TestConcurrentStats(t *testing.T) {
	b := NewBudget(1 << 20)
	fsys := b.NewFS()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := b.Stats(); s.Used > s.Max {
				t.Errorf("used %d over max %d", s.Used, s.Max)
				return
			}
			_, _ = fsys.Stat("f")
		}
	}()
	f := openRW(t, fsys, "f")
	chunk := make([]byte, 4096)
	for {
		if _, errno := f.Write(chunk); errno != 0 {
			break
		}
	}
	f.Close()
	close(stop)
	wg.Wait()
	wantUsed(t, fsys, b.Max())
}
