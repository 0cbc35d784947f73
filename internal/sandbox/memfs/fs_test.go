package memfs

import (
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// The semantic tests run every case against memfs and, as a reference,
// against wazero's own os-backed DirFS on a temporary host directory: the
// errnos a guest sees through DirFS on Linux are what wasi-libc and CPython
// are used to. Where memfs deliberately differs, the case says so.

const (
	rdonly = experimentalsys.O_RDONLY
	rdwr   = experimentalsys.O_RDWR
	wronly = experimentalsys.O_WRONLY
	creat  = experimentalsys.O_CREAT
	excl   = experimentalsys.O_EXCL
	trunc  = experimentalsys.O_TRUNC
	dirf   = experimentalsys.O_DIRECTORY
	appnd  = experimentalsys.O_APPEND
)

type impl struct {
	name string
	new  func(t *testing.T) experimentalsys.FS
}

var impls = []impl{
	{"memfs", func(*testing.T) experimentalsys.FS { return New(1 << 20) }},
	{"dirfs", func(t *testing.T) experimentalsys.FS { return sysfs.DirFS(t.TempDir()) }},
}

// fixture lays out:
//
//	file       "hello"
//	dir/       dir/f2 "x", dir/sub/
//	empty/
func fixture(t *testing.T, fsys experimentalsys.FS) {
	t.Helper()
	writeFile(t, fsys, "file", "hello")
	must(t, fsys.Mkdir("dir", 0o755))
	writeFile(t, fsys, "dir/f2", "x")
	must(t, fsys.Mkdir("dir/sub", 0o755))
	must(t, fsys.Mkdir("empty", 0o755))
}

func must(t *testing.T, errno experimentalsys.Errno) {
	t.Helper()
	if errno != 0 {
		t.Fatalf("unexpected errno %v", errno)
	}
}

func writeFile(t *testing.T, fsys experimentalsys.FS, name, data string) {
	t.Helper()
	f, errno := fsys.OpenFile(name, wronly|creat|trunc, 0o644)
	must(t, errno)
	defer f.Close()
	if n, errno := f.Write([]byte(data)); errno != 0 || n != len(data) {
		t.Fatalf("write %s: n=%d errno=%v", name, n, errno)
	}
}

func readAll(t *testing.T, fsys experimentalsys.FS, name string) string {
	t.Helper()
	f, errno := fsys.OpenFile(name, rdonly, 0)
	must(t, errno)
	defer f.Close()
	var out []byte
	buf := make([]byte, 7) // odd size to cross boundaries
	for {
		n, errno := f.Read(buf)
		must(t, errno)
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

func openOp(path string, flag experimentalsys.Oflag) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno {
		f, errno := fsys.OpenFile(path, flag, 0o644)
		if errno == 0 {
			f.Close()
		}
		return errno
	}
}

// noRef marks a case that cannot run on the host reference.
const noRef = experimentalsys.Errno(0xffff)

func TestPathErrnos(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen+1)
	tests := []struct {
		name string
		op   func(experimentalsys.FS) experimentalsys.Errno
		want experimentalsys.Errno
		// ref is what DirFS answers when it differs from want (or noRef);
		// zero means the same as want.
		ref experimentalsys.Errno
	}{
		{"open missing", openOp("missing", rdonly), experimentalsys.ENOENT, 0},
		{"open create", openOp("new", rdwr|creat), 0, 0},
		{"open create in missing dir", openOp("missing/x", rdwr|creat), experimentalsys.ENOENT, 0},
		{"open create under file", openOp("file/x", rdwr|creat), experimentalsys.ENOTDIR, 0},
		{"open create trailing slash", openOp("new/", rdwr|creat), experimentalsys.EISDIR, 0},
		{"open excl existing file", openOp("file", rdwr|creat|excl), experimentalsys.EEXIST, 0},
		{"open excl existing dir", openOp("dir", rdonly|creat|excl), experimentalsys.EEXIST, 0},
		{"open excl new", openOp("new", rdwr|creat|excl), 0, 0},
		{"open dir rdonly", openOp("dir", rdonly), 0, 0},
		{"open dir O_DIRECTORY", openOp("dir", rdonly|dirf), 0, 0},
		{"open dir trailing slash", openOp("dir/", rdonly), 0, 0},
		{"open dir rdwr", openOp("dir", rdwr), experimentalsys.EISDIR, 0},
		{"open dir wronly", openOp("dir", wronly), experimentalsys.EISDIR, 0},
		{"open dir creat", openOp("dir", rdonly|creat), experimentalsys.EISDIR, 0},
		{"open file O_DIRECTORY", openOp("file", rdonly|dirf), experimentalsys.ENOTDIR, 0},
		{"open file trailing slash", openOp("file/", rdonly), experimentalsys.ENOTDIR, 0},
		{"open through file", openOp("file/x", rdonly), experimentalsys.ENOTDIR, 0},
		{"open name too long", openOp(long, rdwr|creat), experimentalsys.ENAMETOOLONG, 0},
		{"open root", openOp(".", rdonly), 0, 0},
		{"open slash-prefixed", openOp("/dir//f2", rdonly), 0, noRef},

		{"stat missing", stat("missing"), experimentalsys.ENOENT, 0},
		{"stat file trailing slash", stat("file/"), experimentalsys.ENOTDIR, 0},
		{"stat through file", stat("file/x"), experimentalsys.ENOTDIR, 0},
		{"lstat dir", func(fsys experimentalsys.FS) experimentalsys.Errno { _, e := fsys.Lstat("dir"); return e }, 0, 0},

		{"mkdir new", mkdir("newdir"), 0, 0},
		{"mkdir trailing slash", mkdir("newdir/"), 0, 0},
		{"mkdir existing dir", mkdir("dir"), experimentalsys.EEXIST, 0},
		{"mkdir existing file", mkdir("file"), experimentalsys.EEXIST, 0},
		{"mkdir in missing", mkdir("missing/x"), experimentalsys.ENOENT, 0},
		// Linux says ENOTDIR; DirFS rewrites it to ENOENT for Windows' sake.
		{"mkdir under file", mkdir("file/x"), experimentalsys.ENOTDIR, experimentalsys.ENOENT},
		{"mkdir root", mkdir("."), experimentalsys.EEXIST, 0},

		{"rmdir empty", rmdir("empty"), 0, 0},
		{"rmdir non-empty", rmdir("dir"), experimentalsys.ENOTEMPTY, 0},
		{"rmdir file", rmdir("file"), experimentalsys.ENOTDIR, 0},
		{"rmdir missing", rmdir("missing"), experimentalsys.ENOENT, 0},
		{"rmdir root", rmdir("."), experimentalsys.EINVAL, noRef},

		{"unlink file", unlinkOp("file"), 0, 0},
		{"unlink dir", unlinkOp("dir"), experimentalsys.EISDIR, 0},
		{"unlink empty dir", unlinkOp("empty"), experimentalsys.EISDIR, 0},
		{"unlink missing", unlinkOp("missing"), experimentalsys.ENOENT, 0},
		{"unlink file trailing slash", unlinkOp("file/"), experimentalsys.ENOTDIR, 0},
		{"unlink root", unlinkOp("."), experimentalsys.EISDIR, noRef},

		{"rename file", rename("file", "moved"), 0, 0},
		{"rename file into dir", rename("file", "dir/moved"), 0, 0},
		{"rename file over file", rename("file", "dir/f2"), 0, 0},
		{"rename file to itself", rename("file", "file"), 0, 0},
		{"rename missing", rename("missing", "x"), experimentalsys.ENOENT, 0},
		{"rename into missing dir", rename("file", "missing/x"), experimentalsys.ENOENT, 0},
		{"rename file over dir", rename("file", "empty"), experimentalsys.EISDIR, 0},
		{"rename dir over file", rename("dir", "file"), experimentalsys.ENOTDIR, 0},
		{"rename dir over empty dir", rename("dir", "empty"), 0, 0},
		{"rename dir over non-empty dir", rename("empty", "dir"), experimentalsys.ENOTEMPTY, 0},
		{"rename dir into itself", rename("dir", "dir/sub/x"), experimentalsys.EINVAL, 0},
		{"rename file to trailing slash", rename("file", "newname/"), experimentalsys.ENOTDIR, 0},
		{"rename dir to trailing slash", rename("empty", "newname/"), 0, 0},
		{"rename root", rename(".", "x"), experimentalsys.EINVAL, noRef},
		{"rename name too long", rename("file", long), experimentalsys.ENAMETOOLONG, 0},

		{"chmod file", chmod("file"), 0, 0},
		{"chmod missing", chmod("missing"), experimentalsys.ENOENT, 0},
		{"utimens missing", func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Utimens("missing", 1, 2) }, experimentalsys.ENOENT, 0},

		// Links are unsupported here; the host supports them.
		{"link", func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Link("file", "hard") }, experimentalsys.EPERM, noRef},
		{"link missing", func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Link("missing", "hard") }, experimentalsys.ENOENT, 0},
		{"symlink", func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Symlink("file", "soft") }, experimentalsys.EPERM, noRef},
		{"symlink over existing", func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Symlink("x", "file") }, experimentalsys.EEXIST, 0},
		{"readlink regular file", func(fsys experimentalsys.FS) experimentalsys.Errno { _, e := fsys.Readlink("file"); return e }, experimentalsys.EINVAL, 0},
		{"readlink missing", func(fsys experimentalsys.FS) experimentalsys.Errno { _, e := fsys.Readlink("missing"); return e }, experimentalsys.ENOENT, 0},
	}
	for _, im := range impls {
		for _, tc := range tests {
			want := tc.want
			if im.name == "dirfs" && tc.ref != 0 {
				if tc.ref == noRef {
					continue
				}
				want = tc.ref
			}
			t.Run(im.name+"/"+tc.name, func(t *testing.T) {
				fsys := im.new(t)
				fixture(t, fsys)
				if got := tc.op(fsys); got != want {
					t.Fatalf("errno = %v (%d), want %v (%d)", got, got, want, want)
				}
			})
		}
	}
}

func stat(p string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { _, e := fsys.Stat(p); return e }
}

func mkdir(p string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Mkdir(p, 0o755) }
}

func rmdir(p string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Rmdir(p) }
}

func unlinkOp(p string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Unlink(p) }
}

func rename(from, to string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Rename(from, to) }
}

func chmod(p string) func(experimentalsys.FS) experimentalsys.Errno {
	return func(fsys experimentalsys.FS) experimentalsys.Errno { return fsys.Chmod(p, 0o400) }
}

func TestHandleErrnos(t *testing.T) {
	type op func(experimentalsys.File) experimentalsys.Errno
	read := func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Read(make([]byte, 4)); return e }
	pread := func(off int64) op {
		return func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Pread(make([]byte, 4), off); return e }
	}
	write := func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Write([]byte("ab")); return e }
	pwrite := func(off int64) op {
		return func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Pwrite([]byte("ab"), off); return e }
	}
	seek := func(off int64, whence int) op {
		return func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Seek(off, whence); return e }
	}
	truncate := func(n int64) op { return func(f experimentalsys.File) experimentalsys.Errno { return f.Truncate(n) } }
	readdir := func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Readdir(-1); return e }
	fstat := func(f experimentalsys.File) experimentalsys.Errno { _, e := f.Stat(); return e }
	closed := func(o op) op {
		return func(f experimentalsys.File) experimentalsys.Errno { f.Close(); return o(f) }
	}
	tests := []struct {
		name string
		path string
		flag experimentalsys.Oflag
		op   op
		want experimentalsys.Errno
		ref  experimentalsys.Errno
	}{
		{"read rdonly", "file", rdonly, read, 0, 0},
		{"read wronly", "file", wronly, read, experimentalsys.EBADF, 0},
		{"read dir", "dir", rdonly, read, experimentalsys.EISDIR, 0},
		// sys.File documents EINVAL for a negative offset; DirFS passes on
		// os.File's untyped error, which becomes EIO.
		{"pread negative", "file", rdonly, pread(-1), experimentalsys.EINVAL, experimentalsys.EIO},
		{"pread past end", "file", rdonly, pread(100), 0, 0},
		{"pread dir", "dir", rdonly, pread(0), experimentalsys.EISDIR, 0},
		{"write rdonly", "file", rdonly, write, experimentalsys.EBADF, 0},
		{"write wronly", "file", wronly, write, 0, 0},
		{"write dir", "dir", rdonly, write, experimentalsys.EISDIR, 0},
		{"pwrite negative", "file", rdwr, pwrite(-1), experimentalsys.EINVAL, experimentalsys.EIO},
		{"pwrite rdonly", "file", rdonly, pwrite(0), experimentalsys.EBADF, 0},
		{"pwrite dir", "dir", rdonly, pwrite(0), experimentalsys.EISDIR, 0},
		{"seek negative", "file", rdonly, seek(-1, io.SeekStart), experimentalsys.EINVAL, 0},
		{"seek before start", "file", rdonly, seek(-6, io.SeekEnd), experimentalsys.EINVAL, 0},
		{"seek past end", "file", rdonly, seek(100, io.SeekEnd), 0, 0},
		{"seek bad whence", "file", rdonly, seek(0, 3), experimentalsys.EINVAL, 0},
		{"seek dir rewind", "dir", rdonly, seek(0, io.SeekStart), 0, 0},
		{"truncate negative", "file", rdwr, truncate(-1), experimentalsys.EINVAL, 0},
		{"truncate dir", "dir", rdonly, truncate(0), experimentalsys.EISDIR, 0},
		// Linux's ftruncate answers EINVAL on a read-only descriptor; EBADF
		// is the other answer POSIX allows and matches read/write here.
		{"truncate rdonly", "file", rdonly, truncate(1), experimentalsys.EBADF, experimentalsys.EINVAL},
		{"readdir file", "file", rdonly, readdir, experimentalsys.EBADF, 0},
		{"readdir dir", "dir", rdonly, readdir, 0, 0},
		{"closed read", "file", rdonly, closed(read), experimentalsys.EBADF, 0},
		{"closed write", "file", rdwr, closed(write), experimentalsys.EBADF, 0},
		{"closed stat", "file", rdonly, closed(fstat), experimentalsys.EBADF, 0},
		{"closed seek", "file", rdonly, closed(seek(0, io.SeekStart)), experimentalsys.EBADF, 0},
		{"closed truncate", "file", rdwr, closed(truncate(0)), experimentalsys.EBADF, 0},
		{"closed readdir", "dir", rdonly, closed(readdir), experimentalsys.EBADF, 0},
		{"closed close", "file", rdonly, closed(func(f experimentalsys.File) experimentalsys.Errno { return f.Close() }), 0, 0},
		{"closed sync", "file", rdonly, closed(func(f experimentalsys.File) experimentalsys.Errno { return f.Sync() }), experimentalsys.EBADF, 0},
		{"closed utimens", "file", rdonly, closed(func(f experimentalsys.File) experimentalsys.Errno { return f.Utimens(1, 1) }), experimentalsys.EBADF, 0},
		{"setappend dir", "dir", rdonly, func(f experimentalsys.File) experimentalsys.Errno { return f.SetAppend(true) }, experimentalsys.EISDIR, 0},
	}
	for _, im := range impls {
		for _, tc := range tests {
			want := tc.want
			if im.name == "dirfs" && tc.ref != 0 {
				want = tc.ref
			}
			t.Run(im.name+"/"+tc.name, func(t *testing.T) {
				fsys := im.new(t)
				fixture(t, fsys)
				f, errno := fsys.OpenFile(tc.path, tc.flag, 0)
				must(t, errno)
				defer f.Close()
				if got := tc.op(f); got != want {
					t.Fatalf("errno = %v (%d), want %v (%d)", got, got, want, want)
				}
			})
		}
	}
}

// TestFileData checks contents through every read and write path, on both
// implementations.
func TestFileData(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			t.Run("seek write pread", func(t *testing.T) {
				fsys := im.new(t)
				f, errno := fsys.OpenFile("f", rdwr|creat, 0o644)
				must(t, errno)
				defer f.Close()
				writeAll(t, f, "hello world")
				if off, errno := f.Seek(6, io.SeekStart); errno != 0 || off != 6 {
					t.Fatalf("seek = %d, %v", off, errno)
				}
				writeAll(t, f, "WORLD!")
				if got := preadAll(t, f, 0, 64); got != "hello WORLD!" {
					t.Fatalf("content %q", got)
				}
				if off, errno := f.Seek(0, io.SeekCurrent); errno != 0 || off != 12 {
					t.Fatalf("pread moved the offset to %d, %v", off, errno)
				}
				if n, errno := f.Pwrite([]byte("J"), 0); errno != 0 || n != 1 {
					t.Fatalf("pwrite = %d, %v", n, errno)
				}
				if got := preadAll(t, f, 0, 64); got != "Jello WORLD!" {
					t.Fatalf("content after pwrite %q", got)
				}
				if off, _ := f.Seek(0, io.SeekCurrent); off != 12 {
					t.Fatalf("pwrite moved the offset to %d", off)
				}
				if off, errno := f.Seek(-3, io.SeekEnd); errno != 0 || off != 9 {
					t.Fatalf("seek end = %d, %v", off, errno)
				}
				buf := make([]byte, 10)
				if n, _ := f.Read(buf); string(buf[:n]) != "LD!" {
					t.Fatalf("read after seek end %q", buf[:n])
				}
				if n, errno := f.Read(buf); n != 0 || errno != 0 {
					t.Fatalf("read at EOF = %d, %v", n, errno)
				}
			})
			t.Run("holes read as zeros", func(t *testing.T) {
				fsys := im.new(t)
				f, errno := fsys.OpenFile("f", rdwr|creat, 0o644)
				must(t, errno)
				defer f.Close()
				writeAll(t, f, "ab")
				if _, errno := f.Seek(pageSize+5, io.SeekStart); errno != 0 {
					t.Fatal(errno)
				}
				writeAll(t, f, "z")
				got := preadAll(t, f, 0, 2*pageSize)
				want := "ab" + strings.Repeat("\x00", pageSize+3) + "z"
				if got != want {
					t.Fatalf("len %d, want %d; differs at %d", len(got), len(want), firstDiff(got, want))
				}
				if n, errno := f.Pwrite([]byte("q"), 3*pageSize); errno != 0 || n != 1 {
					t.Fatalf("pwrite past end = %d, %v", n, errno)
				}
				st, errno := f.Stat()
				must(t, errno)
				if st.Size != 3*pageSize+1 {
					t.Fatalf("size %d", st.Size)
				}
				if got := preadAll(t, f, 2*pageSize-1, 4); got != "\x00\x00\x00\x00" {
					t.Fatalf("hole %q", got)
				}
			})
			t.Run("truncate", func(t *testing.T) {
				fsys := im.new(t)
				f, errno := fsys.OpenFile("f", rdwr|creat, 0o644)
				must(t, errno)
				defer f.Close()
				data := strings.Repeat("0123456789", pageSize/5) // two pages
				writeAll(t, f, data)
				must(t, f.Truncate(pageSize+3))
				must(t, f.Truncate(pageSize+10)) // regrow: the cut bytes must not come back
				want := data[:pageSize+3] + strings.Repeat("\x00", 7)
				if got := preadAll(t, f, 0, 3*pageSize); got != want {
					t.Fatalf("differs at %d", firstDiff(got, want))
				}
				// Overwrite inside the regrown tail, which reuses the page.
				if _, errno := f.Pwrite([]byte("Z"), pageSize+8); errno != 0 {
					t.Fatal(errno)
				}
				want = want[:pageSize+8] + "Z" + want[pageSize+9:]
				if got := preadAll(t, f, 0, 3*pageSize); got != want {
					t.Fatalf("after pwrite differs at %d", firstDiff(got, want))
				}
				must(t, f.Truncate(0))
				if got := preadAll(t, f, 0, 10); got != "" {
					t.Fatalf("after truncate 0: %q", got)
				}
			})
			t.Run("O_TRUNC and O_APPEND", func(t *testing.T) {
				fsys := im.new(t)
				writeFile(t, fsys, "f", "old contents")
				f, errno := fsys.OpenFile("f", wronly|appnd, 0)
				must(t, errno)
				if !f.IsAppend() {
					t.Fatal("IsAppend false after O_APPEND")
				}
				_, _ = f.Seek(0, io.SeekStart)
				writeAll(t, f, "+1")
				must(t, f.SetAppend(false))
				_, _ = f.Seek(0, io.SeekStart)
				writeAll(t, f, "O")
				f.Close()
				if got := readAll(t, fsys, "f"); got != "Old contents+1" {
					t.Fatalf("content %q", got)
				}
				f, errno = fsys.OpenFile("f", rdwr|trunc, 0)
				must(t, errno)
				st, _ := f.Stat()
				f.Close()
				if st.Size != 0 {
					t.Fatalf("size after O_TRUNC %d", st.Size)
				}
			})
			t.Run("unlinked while open", func(t *testing.T) {
				fsys := im.new(t)
				writeFile(t, fsys, "f", "still here")
				f, errno := fsys.OpenFile("f", rdwr, 0)
				must(t, errno)
				defer f.Close()
				must(t, fsys.Unlink("f"))
				if _, errno := fsys.Stat("f"); errno != experimentalsys.ENOENT {
					t.Fatalf("stat after unlink %v", errno)
				}
				if got := preadAll(t, f, 0, 64); got != "still here" {
					t.Fatalf("content via open handle %q", got)
				}
				st, errno := f.Stat()
				must(t, errno)
				if st.Nlink != 0 {
					t.Fatalf("nlink %d after unlink", st.Nlink)
				}
				writeFile(t, fsys, "f", "new")
				if got := preadAll(t, f, 0, 64); got != "still here" {
					t.Fatalf("old handle sees the new file: %q", got)
				}
			})
			t.Run("rename replaces", func(t *testing.T) {
				fsys := im.new(t)
				writeFile(t, fsys, "a", "A")
				writeFile(t, fsys, "b", "B")
				stA, _ := fsys.Stat("a")
				must(t, fsys.Rename("a", "b"))
				if got := readAll(t, fsys, "b"); got != "A" {
					t.Fatalf("b = %q", got)
				}
				stB, _ := fsys.Stat("b")
				if stB.Ino != stA.Ino {
					t.Fatalf("inode changed on rename: %d -> %d", stA.Ino, stB.Ino)
				}
				if _, errno := fsys.Stat("a"); errno != experimentalsys.ENOENT {
					t.Fatalf("a still there: %v", errno)
				}
			})
			t.Run("rename dir moves subtree", func(t *testing.T) {
				fsys := im.new(t)
				fixture(t, fsys)
				must(t, fsys.Rename("dir", "empty/moved"))
				if got := readAll(t, fsys, "empty/moved/f2"); got != "x" {
					t.Fatalf("moved file %q", got)
				}
				writeFile(t, fsys, "empty/moved/sub/deep", "d")
				must(t, fsys.Rename("empty/moved/sub", "sub2"))
				if got := readAll(t, fsys, "sub2/deep"); got != "d" {
					t.Fatalf("deep %q", got)
				}
			})
		})
	}
}

func TestReaddir(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			fsys := im.new(t)
			fixture(t, fsys)
			d, errno := fsys.OpenFile(".", rdonly|dirf, 0)
			must(t, errno)
			defer d.Close()
			var names []string
			for {
				ents, errno := d.Readdir(2)
				must(t, errno)
				for _, e := range ents {
					names = append(names, e.Name)
					st, errno := fsys.Stat(e.Name)
					must(t, errno)
					if e.IsDir() != st.Mode.IsDir() || e.Ino != st.Ino {
						t.Errorf("dirent %s: dir=%v ino=%d, stat dir=%v ino=%d", e.Name, e.IsDir(), e.Ino, st.Mode.IsDir(), st.Ino)
					}
				}
				if len(ents) < 2 {
					break
				}
			}
			slices.Sort(names)
			if want := []string{"dir", "empty", "file"}; !slices.Equal(names, want) {
				t.Fatalf("names %v, want %v (no dot entries)", names, want)
			}
			// Rewind sees entries created since.
			writeFile(t, fsys, "later", "")
			if _, errno := d.Seek(0, io.SeekStart); errno != 0 {
				t.Fatal(errno)
			}
			ents, errno := d.Readdir(-1)
			must(t, errno)
			if len(ents) != 4 {
				t.Fatalf("after rewind %d entries: %v", len(ents), ents)
			}
		})
	}
	t.Run("memfs order and removal during listing", func(t *testing.T) {
		fsys := New(1 << 20)
		for _, n := range []string{"c", "a", "b", "d"} {
			writeFile(t, fsys, n, "")
		}
		d, errno := fsys.OpenFile(".", rdonly, 0)
		must(t, errno)
		defer d.Close()
		first, _ := d.Readdir(1)
		must(t, fsys.Unlink("b"))
		rest, _ := d.Readdir(0)
		var got []string
		for _, e := range append(first, rest...) {
			got = append(got, e.Name)
		}
		if want := []string{"a", "c", "d"}; !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

func TestStatFields(t *testing.T) {
	clock := int64(1_700_000_000_000_000_000)
	now := func() int64 { return clock }
	fsys := New(1<<20, WithClock(func() time.Time { return time.Unix(0, now()) }))
	fixture(t, fsys)
	st, errno := fsys.Stat("file")
	must(t, errno)
	if st.Mode != 0o644 || st.Size != 5 || st.Nlink != 1 || st.Ino == 0 || st.Dev == 0 {
		t.Fatalf("file stat %+v", st)
	}
	if st.Atim != clock || st.Mtim != clock || st.Ctim != clock {
		t.Fatalf("file times %+v", st)
	}
	dst, _ := fsys.Stat("dir")
	if dst.Mode != fs.ModeDir|0o755 || dst.Nlink != 3 { // ".", entry, sub/..
		t.Fatalf("dir stat %+v", dst)
	}
	root, _ := fsys.Stat(".")
	if root.Mode&fs.ModeDir == 0 || root.Ino == st.Ino || root.Dev != st.Dev {
		t.Fatalf("root stat %+v", root)
	}
	inos := map[uint64]string{}
	for _, p := range []string{".", "file", "dir", "dir/f2", "dir/sub", "empty"} {
		s, _ := fsys.Stat(p)
		if prev, dup := inos[s.Ino]; dup {
			t.Fatalf("inode %d shared by %s and %s", s.Ino, prev, p)
		}
		inos[s.Ino] = p
	}

	clock += 10
	must(t, fsys.Utimens("file", 111, experimentalsys.UTIME_OMIT))
	st, _ = fsys.Stat("file")
	if st.Atim != 111 || st.Mtim != 1_700_000_000_000_000_000 || st.Ctim != clock {
		t.Fatalf("after utimens(atim) %+v", st)
	}
	must(t, fsys.Chmod("file", 0o400))
	st, _ = fsys.Stat("file")
	if st.Mode != 0o400 {
		t.Fatalf("mode after chmod %v", st.Mode)
	}
	clock += 10
	f, _ := fsys.OpenFile("file", wronly, 0)
	writeAll(t, f, "!") // permission bits are not enforced
	fst, _ := f.Stat()
	f.Close()
	if fst.Mtim != clock || fst.Ctim != clock || fst.Size != 5 {
		t.Fatalf("after write %+v", fst)
	}
	clock += 10
	must(t, fsys.Mkdir("dir/new", 0o700))
	dst2, _ := fsys.Stat("dir")
	if dst2.Mtim != clock || dst2.Nlink != 4 {
		t.Fatalf("dir after mkdir %+v", dst2)
	}

	// Two file systems from one budget are distinct devices.
	b := NewBudget(1 << 20)
	a1, _ := b.NewFS().Stat(".")
	a2, _ := b.NewFS().Stat(".")
	if a1.Dev == a2.Dev {
		t.Fatalf("two mounts share dev %d", a1.Dev)
	}
}

func writeAll(t *testing.T, f experimentalsys.File, s string) {
	t.Helper()
	if n, errno := f.Write([]byte(s)); errno != 0 || n != len(s) {
		t.Fatalf("write %q: n=%d errno=%v", s, n, errno)
	}
}

func preadAll(t *testing.T, f experimentalsys.File, off int64, size int) string {
	t.Helper()
	buf := make([]byte, size)
	n, errno := f.Pread(buf, off)
	if errno != 0 {
		t.Fatalf("pread: %v", errno)
	}
	return string(buf[:n])
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
