package pool_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// scratchBytes is the tests' scratch bound: small, so that filling it is
// quick, but room for the 20 000 empty files of "RemoveFiles in chunks"
// (memfs charges memfs.InodeCost for each).
const scratchBytes = 8 << 20

// TestFiles runs the file operations against real sandboxes of every
// provider: what the API puts, code reads; what code writes, the API lists
// and reads back byte for byte; the bounds and the path rules hold; a lost
// interpreter shows as a new generation with empty scratch space.
func TestFiles(t *testing.T) {
	for _, provider := range sandboxtest.Providers() {
		t.Run(provider, func(t *testing.T) {
			p := sandboxtest.NewProvider(t, provider, func(c *pool.Config) {
				c.Limits.ScratchBytes = scratchBytes
				c.MaxSessions = 2
			})
			for _, tc := range fileCases {
				if tc.only != "" && tc.only != provider {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					s := open(t, p)
					tc.run(t, &fileSession{t: t, s: s, provider: provider})
				})
			}
		})
	}
}

// fileSession wraps a session with helpers that fail the test.
type fileSession struct {
	t        *testing.T
	s        sandbox.Session
	provider string
}

func open(t *testing.T, p sandbox.Provider) sandbox.Session {
	t.Helper()
	s, err := p.Open(ctx(t), sandbox.SessionOptions{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if g := s.Generation(); g != 1 {
		t.Fatalf("a new session's Generation() = %d, want 1", g)
	}
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func (f *fileSession) write(path string, data []byte) {
	f.t.Helper()
	if err := f.s.WriteFile(ctx(f.t), path, data); err != nil {
		f.t.Fatalf("WriteFile(%s): %v", path, err)
	}
}

func (f *fileSession) read(path string) []byte {
	f.t.Helper()
	b, err := f.s.ReadFile(ctx(f.t), path, sandbox.MaxFileBytes)
	if err != nil {
		f.t.Fatalf("ReadFile(%s): %v", path, err)
	}
	return b
}

func (f *fileSession) list(dir string) map[string]int64 {
	f.t.Helper()
	l, err := f.s.ListFiles(ctx(f.t), dir)
	if err != nil {
		f.t.Fatalf("ListFiles(%s): %v", dir, err)
	}
	files := l.Files
	out := map[string]int64{}
	for i, fi := range files {
		if i > 0 && files[i-1].Path >= fi.Path {
			f.t.Errorf("ListFiles(%s) is not sorted: %q before %q", dir, files[i-1].Path, fi.Path)
		}
		if d := time.Since(fi.ModTime); d < -time.Minute || d > 10*time.Minute {
			f.t.Errorf("%s: ModTime %v is not recent", fi.Path, fi.ModTime)
		}
		out[fi.Path] = fi.Size
	}
	return out
}

func (f *fileSession) remove(paths ...string) {
	f.t.Helper()
	if err := f.s.RemoveFiles(ctx(f.t), paths); err != nil {
		f.t.Fatalf("RemoveFiles(%d paths): %.300v", len(paths), err)
	}
}

// run runs code that must complete, and returns its stdout.
func (f *fileSession) run(code string) string {
	f.t.Helper()
	r, err := f.s.Run(ctx(f.t), code)
	if err != nil || r.Outcome != sandbox.OutcomeCompleted {
		f.t.Fatalf("Run(%q): %+v, %v", code, r, err)
	}
	return r.Stdout
}

func wantFiles(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("files = %v, want %v", got, want)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: %v; want an error matching %v", what, err, target)
	}
}

// binary has every byte value, NULs and sequences that are not UTF-8.
func binary(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/256)
	}
	return append(b, 0, 0, 0xff, 0xfe, 0xc3, 0x28)
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

var fileCases = []struct {
	name string
	only string // the one provider the case applies to, if any
	run  func(t *testing.T, f *fileSession)
}{
	{"round trip", "", func(t *testing.T, f *fileSession) {
		csv := []byte("region,amount\nnorth,10\nsouth,5\n")
		f.write("/mnt/data/x.csv", csv)
		if out := f.run("print(open('/mnt/data/x.csv').read().splitlines())"); !strings.Contains(out, "['region,amount', 'north,10', 'south,5']") {
			t.Fatalf("the code read %q", out)
		}
		bin := binary(70000)
		f.write("/mnt/data/in.bin", bin)
		out := f.run(`import hashlib, os
data = open('/mnt/data/in.bin', 'rb').read()
print(hashlib.sha256(data).hexdigest())
os.makedirs('/mnt/data/out', exist_ok=True)
with open('/mnt/data/out/result.bin', 'wb') as fh:
    fh.write(bytes(range(256)) * 3 + b'\x00\xff\x00')`)
		if !strings.Contains(out, sha(bin)) {
			t.Errorf("the code saw sha256 %q, want %s", out, sha(bin))
		}
		wantFiles(t, f.list("/mnt/data"), map[string]int64{
			"/mnt/data/in.bin": int64(len(bin)), "/mnt/data/out/result.bin": 771, "/mnt/data/x.csv": int64(len(csv)),
		})
		want := append(bytes.Repeat(func() []byte {
			b := make([]byte, 256)
			for i := range b {
				b[i] = byte(i)
			}
			return b
		}(), 3), 0, 0xff, 0)
		if got := f.read("/mnt/data/out/result.bin"); !bytes.Equal(got, want) {
			t.Errorf("ReadFile(result.bin) = %d bytes, differs from what the code wrote", len(got))
		}
		if got := f.read("/mnt/data/in.bin"); !bytes.Equal(got, bin) {
			t.Errorf("ReadFile(in.bin) = %d bytes, differs from what was written", len(got))
		}
		if got := f.read("/mnt/data/./out/../x.csv"); !bytes.Equal(got, csv) {
			t.Errorf("ReadFile through a clean path = %q", got)
		}
		f.write("/mnt/data/empty", nil)
		if got := f.read("/mnt/data/empty"); got == nil || len(got) != 0 {
			t.Errorf("ReadFile(empty) = %#v, want an empty slice", got)
		}
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d after file operations, want 1", g)
		}
	}},
	{"replace", "", func(t *testing.T, f *fileSession) {
		f.write("/mnt/data/r.txt", []byte("the first, longer version"))
		f.write("/mnt/data/r.txt", []byte("two!"))
		if got := string(f.read("/mnt/data/r.txt")); got != "two!" {
			t.Errorf("after replacing: %q", got)
		}
		if out := f.run("print(repr(open('/mnt/data/r.txt').read()))"); !strings.Contains(out, "'two!'") {
			t.Errorf("the code read %q", out)
		}
		// No temporary file is left beside it.
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/r.txt": 4})
	}},
	{"nested directories", "", func(t *testing.T, f *fileSession) {
		f.write("/mnt/data/a/b/c/d.txt", []byte("deep"))
		f.write("/tmp/t/u.txt", []byte("tmp"))
		if out := f.run("import os\nprint(os.path.isdir('/mnt/data/a/b/c'), open('/tmp/t/u.txt').read())"); !strings.Contains(out, "True tmp") {
			t.Errorf("the code saw %q", out)
		}
		wantFiles(t, f.list("/mnt/data/a"), map[string]int64{"/mnt/data/a/b/c/d.txt": 4})
		if got := f.list("/tmp"); got["/tmp/t/u.txt"] != 3 {
			t.Errorf("ListFiles(/tmp) = %v, lacks /tmp/t/u.txt", got)
		}
		_, err := f.s.ListFiles(ctx(t), "/mnt/data/nowhere")
		wantErr(t, "ListFiles of a missing directory", err, fs.ErrNotExist)
		_, err = f.s.ListFiles(ctx(t), "/mnt/data/a/b/c/d.txt")
		wantErr(t, "ListFiles of a file", err, sandbox.ErrInvalidPath)
	}},
	{"paths outside the scratch space are refused", "", func(t *testing.T, f *fileSession) {
		for _, p := range []string{"/mnt/data/../etc/passwd", "/etc/x", "x.csv", "mnt/data/x", "", "/mnt/data/a\x00b",
			"/mnt/data", "/tmp/", "/mnt/datax/y", "/usr/lib/os-release", "/mnt/data/\xff\xfe"} {
			wantErr(t, fmt.Sprintf("WriteFile(%q)", p), f.s.WriteFile(ctx(t), p, []byte("x")), sandbox.ErrInvalidPath)
			_, err := f.s.ReadFile(ctx(t), p, 10)
			wantErr(t, fmt.Sprintf("ReadFile(%q)", p), err, sandbox.ErrInvalidPath)
		}
		for _, d := range []string{"/", "/etc", "/mnt", "/mnt/data/../..", "tmp"} {
			_, err := f.s.ListFiles(ctx(t), d)
			wantErr(t, fmt.Sprintf("ListFiles(%q)", d), err, sandbox.ErrInvalidPath)
		}
		// A name longer than a directory entry holds is refused cleanly, in
		// the last place or a parent's.
		long := strings.Repeat("n", 256)
		for _, p := range []string{"/mnt/data/" + long, "/mnt/data/" + long + "/x", "/tmp/d/" + long + "/e/f"} {
			wantErr(t, fmt.Sprintf("WriteFile(%.20s…)", p), f.s.WriteFile(ctx(t), p, []byte("x")), sandbox.ErrInvalidPath)
			if _, err := f.s.ReadFile(ctx(t), p, 10); err == nil {
				t.Errorf("ReadFile(%.20s…) succeeded", p)
			}
		}
		// What stands in the way of a write is replaced: a file where a
		// parent must be, a directory where the file goes.
		f.write("/mnt/data/f", []byte("a file"))
		f.write("/mnt/data/f/g", []byte("below what was a file"))
		if got := string(f.read("/mnt/data/f/g")); got != "below what was a file" {
			t.Errorf("WriteFile below a file, then ReadFile: %q", got)
		}
		f.write("/mnt/data/dir/x", []byte("x"))
		f.write("/mnt/data/dir/sub/y", []byte("y"))
		f.write("/mnt/data/dir", []byte("over what was a directory"))
		if got := string(f.read("/mnt/data/dir")); got != "over what was a directory" {
			t.Errorf("WriteFile over a directory, then ReadFile: %q", got)
		}
		f.write("/mnt/data/adir/x", []byte("x"))
		_, err := f.s.ReadFile(ctx(t), "/mnt/data/adir", 10)
		wantErr(t, "ReadFile of a directory", err, fs.ErrNotExist)
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/adir/x": 1, "/mnt/data/dir": 25, "/mnt/data/f/g": 21})
		if out := f.run("import os\nprint(os.path.isdir('/mnt/data/f'), os.path.isfile('/mnt/data/dir'), os.path.exists('/mnt/data/" + long[:200] + "'))"); !strings.Contains(out, "True True False") {
			t.Errorf("after the replacements the code sees %q", out)
		}
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d after refusals, want 1", g)
		}
	}},
	{"WriteFile replaces a tree the code made", "", func(t *testing.T, f *fileSession) {
		out := f.run(`import os
os.makedirs('/mnt/data/t/a/b/c')
open('/mnt/data/t/a/b/c/f', 'w').write('deep')
os.makedirs('/mnt/data/t/ro/sub')
open('/mnt/data/t/ro/sub/f', 'w').write('x')
open('/mnt/data/file', 'w').write('x')
for make in (lambda: os.chmod('/mnt/data/t/ro/sub', 0o500), lambda: os.chmod('/mnt/data/t/ro', 0o500)):
    try:
        make()
    except (OSError, AttributeError, NotImplementedError) as e:
        print('cannot:', e)`)
		if strings.Contains(out, "cannot") && f.provider == "gvisor" {
			t.Errorf("gVisor's guest could not make its tree: %s", out)
		}
		f.write("/mnt/data/t", []byte("one file"))
		f.write("/mnt/data/file/a/b/c", []byte("three levels below a file"))
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/t": 8, "/mnt/data/file/a/b/c": 25})
		if out := f.run("print(open('/mnt/data/t').read(), open('/mnt/data/file/a/b/c').read())"); !strings.Contains(out, "one file three levels below a file") {
			t.Errorf("the code reads %q", out)
		}
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d, want 1", g)
		}
	}},
	{"missing and too large", "", func(t *testing.T, f *fileSession) {
		_, err := f.s.ReadFile(ctx(t), "/mnt/data/missing.csv", 10)
		wantErr(t, "ReadFile of a missing file", err, fs.ErrNotExist)
		wantErr(t, "ReadFile of a missing file", err, sandbox.ErrNotExist)
		_, err = f.s.ReadFile(ctx(t), "/mnt/data/no/such/dir/f", 10)
		wantErr(t, "ReadFile below a missing directory", err, fs.ErrNotExist)
		data := binary(1 << 20)
		f.write("/mnt/data/m.bin", data)
		_, err = f.s.ReadFile(ctx(t), "/mnt/data/m.bin", 1000)
		wantErr(t, "ReadFile above max", err, sandbox.ErrTooLarge)
		got, err := f.s.ReadFile(ctx(t), "/mnt/data/m.bin", int64(len(data)))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("ReadFile at exactly max: %d bytes, %v", len(got), err)
		}
	}},
	{"the scratch bound", "", func(t *testing.T, f *fileSession) {
		err := f.s.WriteFile(ctx(t), "/mnt/data/huge", make([]byte, scratchBytes+1))
		wantErr(t, "WriteFile above the scratch bound", err, sandbox.ErrScratchFull)
		big := bytes.Repeat([]byte("0123456789abcdef"), (scratchBytes*5/8)/16)
		f.write("/mnt/data/big1", big)
		// Does not fit beside big1: refused by the interpreter's own bound
		// (memfs's budget, gVisor's tmpfs size), and nothing of it stays:
		// neither the file, nor a temporary one, nor the directories made
		// for it.
		err = f.s.WriteFile(ctx(t), "/mnt/data/new/dir/big2", big)
		wantErr(t, "WriteFile beyond what is left", err, sandbox.ErrScratchFull)
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/big1": int64(len(big))})
		if out := f.run("import os\nprint(sorted(os.listdir('/mnt/data')))"); !strings.Contains(out, "['big1']") {
			t.Errorf("the code sees %q in /mnt/data", out)
		}
		// A write that does not fit after making way: what was removed for
		// it stays removed, the directories made for it do not stay.
		f.write("/mnt/data/obst", []byte("in the way"))
		err = f.s.WriteFile(ctx(t), "/mnt/data/obst/new/big2", big)
		wantErr(t, "WriteFile beyond what is left, below a file", err, sandbox.ErrScratchFull)
		if out := f.run("import os\nprint(sorted(os.listdir('/mnt/data')))"); !strings.Contains(out, "['big1']") {
			t.Errorf("after a write that did not fit below a file the code sees %q in /mnt/data", out)
		}
		// Replacing with something that does not fit keeps the old file.
		err = f.s.WriteFile(ctx(t), "/mnt/data/big1", append(big, big...)[:scratchBytes])
		wantErr(t, "replacing beyond what is left", err, sandbox.ErrScratchFull)
		if got := f.read("/mnt/data/big1"); !bytes.Equal(got, big) {
			t.Errorf("a failed replace changed the file: %d bytes", len(got))
		}
		f.write("/mnt/data/small", []byte("still room"))
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d, want 1: a full scratch space is an answer, not a loss", g)
		}
	}},
	{"a lost interpreter is a new generation", "", func(t *testing.T, f *fileSession) {
		f.write("/mnt/data/keep.txt", []byte("v1"))
		f.run("x = 41")
		r, err := f.s.Run(ctx(t), "import os; os._exit(1)")
		if err != nil || r.Outcome != sandbox.OutcomeCrashed {
			t.Fatalf("os._exit(1): %+v, %v", r, err)
		}
		files := f.list("/mnt/data")
		if g := f.s.Generation(); g != 2 {
			t.Errorf("Generation() = %d after the interpreter was lost, want 2", g)
		}
		wantFiles(t, files, map[string]int64{})
		// The caller puts them again; the next run says the variables went.
		f.write("/mnt/data/keep.txt", []byte("v2"))
		r, err = f.s.Run(ctx(t), "print(open('/mnt/data/keep.txt').read(), 'x' in globals())")
		if err != nil || !strings.Contains(r.Stdout, "v2 False") || !r.StateLost {
			t.Errorf("the first run after the loss: %+v, %v; want v2 False and StateLost", r, err)
		}
		if r, _ := f.s.Run(ctx(t), "1"); r.StateLost {
			t.Errorf("StateLost reported twice")
		}
		if g := f.s.Generation(); g != 2 {
			t.Errorf("Generation() = %d, want 2", g)
		}
	}},
	{"symbolic links are not followed", "", func(t *testing.T, f *fileSession) {
		// WASM's memfs has no links (os.symlink fails): the same checks
		// then see plain absence.
		f.run(`import os
for target, name in [('/etc/passwd', 'link'), ('/usr', 'usrlink'), ('/tmp', 'tmplink')]:
    try:
        os.symlink(target, '/mnt/data/' + name)
    except OSError as e:
        print('no link:', e)
try:
    os.mkfifo('/mnt/data/fifo')
except (OSError, AttributeError) as e:
    print('no fifo:', e)
os.makedirs('/mnt/data/real', exist_ok=True)
open('/mnt/data/real/f', 'w').write('x')
open('/tmp/secret', 'w').write('not through the link')`)
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/real/f": 1})
		for _, p := range []string{"/mnt/data/link", "/mnt/data/usrlink/lib/os-release", "/mnt/data/tmplink/secret", "/mnt/data/fifo"} {
			b, err := f.s.ReadFile(ctx(t), p, 1<<20)
			wantErr(t, fmt.Sprintf("ReadFile(%s)", p), err, fs.ErrNotExist)
			if len(b) > 0 {
				t.Errorf("ReadFile(%s) returned %q", p, b)
			}
		}
		for _, d := range []string{"/mnt/data/usrlink", "/mnt/data/tmplink"} {
			if l, err := f.s.ListFiles(ctx(t), d); err == nil || len(l.Files) > 0 {
				t.Errorf("ListFiles(%s) = %v, %v; want an error", d, l.Files, err)
			}
		}
		// A link where a parent must be is replaced by a directory; nothing
		// is written through it.
		tmpBefore := f.list("/tmp")
		f.write("/mnt/data/tmplink/planted", []byte("x"))
		if _, err := f.s.ReadFile(ctx(t), "/tmp/planted", 10); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("WriteFile went through the link: ReadFile(/tmp/planted): %v", err)
		}
		wantFiles(t, f.list("/tmp"), tmpBefore)
		if got := string(f.read("/mnt/data/tmplink/planted")); got != "x" {
			t.Errorf("ReadFile(/mnt/data/tmplink/planted) = %q", got)
		}
		if got := string(f.read("/tmp/secret")); got != "not through the link" {
			t.Errorf("the link's target changed: /tmp/secret holds %q", got)
		}
		if out := f.run("import os\nprint(os.path.islink('/mnt/data/tmplink'), os.path.isdir('/mnt/data/tmplink'), os.path.exists('/tmp/planted'))"); !strings.Contains(out, "False True False") {
			t.Errorf("after writing below the link the code sees %q", out)
		}
		f.write("/mnt/data/usrlink/lib/os-release", []byte("mine"))
		if out := f.run("import os\nprint(os.path.islink('/mnt/data/usrlink'), open('/mnt/data/usrlink/lib/os-release').read(), os.path.exists('/usr/lib/os-release'))"); !strings.Contains(out, "False mine") {
			t.Errorf("after writing below the link to /usr the code sees %q", out)
		}
		// A FIFO where the file goes is replaced (where the guest has them).
		f.write("/mnt/data/fifo", []byte("no longer a fifo"))
		if got := string(f.read("/mnt/data/fifo")); got != "no longer a fifo" {
			t.Errorf("ReadFile(/mnt/data/fifo) = %q", got)
		}
		// Writing at a link's name replaces the link, not its target.
		f.write("/mnt/data/link", []byte("mine"))
		if out := f.run("import os\nprint(os.path.islink('/mnt/data/link'), open('/mnt/data/link').read())"); !strings.Contains(out, "False mine") {
			t.Errorf("after writing at the link's name the code sees %q", out)
		}
	}},
	{"RemoveFiles", "", func(t *testing.T, f *fileSession) {
		f.write("/mnt/data/a.txt", []byte("a"))
		f.write("/mnt/data/keep.txt", []byte("keep"))
		f.write("/mnt/data/tree/x/y.txt", []byte("y"))
		f.write("/tmp/t.txt", []byte("t"))
		f.write("/tmp/keep/k", []byte("k"))
		// The tree also holds what only code makes: empty and deep
		// directories, a name that is not UTF-8, a FIFO and a directory
		// the code made read-only (where the guest has them).
		out := f.run(`import os
os.makedirs('/mnt/data/tree/empty')
os.makedirs('/mnt/data/tree/d/e/e/p')
open('/mnt/data/tree/d/e/e/p/f', 'w').write('deep')
os.makedirs('/mnt/data/tree/ro/sub')
open('/mnt/data/tree/ro/sub/f', 'w').write('x')
for make in (lambda: open(b'/mnt/data/tree/\xff', 'w').write('not utf-8'),
             lambda: os.mkfifo('/mnt/data/tree/fifo'),
             lambda: os.chmod('/mnt/data/tree/ro/sub', 0o500),
             lambda: os.chmod('/mnt/data/tree/ro', 0o500)):
    try:
        make()
    except (OSError, AttributeError, NotImplementedError) as e:
        print('cannot:', e)`)
		if strings.Contains(out, "cannot") {
			t.Logf("the tree lacks what the guest cannot make: %s", out)
			if f.provider == "gvisor" {
				t.Errorf("gVisor's guest could not make its tree: %s", out)
			}
		}
		// A missing path, one below a missing directory and one below a
		// file have nothing at them: not an error.
		f.remove("/mnt/data/a.txt", "/mnt/data/tree", "/mnt/data/missing", "/mnt/data/no/such/f",
			"/mnt/data/keep.txt/below", "/tmp/t.txt", "/mnt/data/a.txt")
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/keep.txt": 4})
		wantFiles(t, f.list("/tmp/keep"), map[string]int64{"/tmp/keep/k": 1})
		if out := f.run("import os\nprint(sorted(os.listdir('/mnt/data')), os.path.exists('/tmp/t.txt'))"); !strings.Contains(out, "['keep.txt'] False") {
			t.Errorf("after RemoveFiles the code sees %q", out)
		}
		f.remove() // nothing to do
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d after removals, want 1", g)
		}
	}},
	{"RemoveFiles refuses an invalid path and removes nothing", "", func(t *testing.T, f *fileSession) {
		f.write("/mnt/data/a.txt", []byte("a"))
		f.write("/mnt/data/d/b.txt", []byte("b"))
		for _, bad := range []string{"/etc/passwd", "/mnt/data", "/tmp/", "x.csv", "", "/mnt/data/../etc",
			"/mnt/data/a\x00b", "/mnt/data/\xff", "/mnt/data/" + strings.Repeat("a", sandbox.MaxPathBytes)} {
			err := f.s.RemoveFiles(ctx(t), []string{"/mnt/data/a.txt", "/mnt/data/d", bad})
			wantErr(t, fmt.Sprintf("RemoveFiles with %q", bad), err, sandbox.ErrInvalidPath)
		}
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/a.txt": 1, "/mnt/data/d/b.txt": 1})
		// A name longer than a directory entry can hold names nothing.
		f.remove("/mnt/data/"+strings.Repeat("n", 300), "/mnt/data/"+strings.Repeat("n", 300)+"/x")
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/a.txt": 1, "/mnt/data/d/b.txt": 1})
		f.s.Close()
		wantErr(t, "RemoveFiles after Close", f.s.RemoveFiles(ctx(t), []string{"/mnt/data/a.txt"}), sandbox.ErrClosed)
		wantErr(t, "RemoveFiles of nothing after Close", f.s.RemoveFiles(ctx(t), nil), sandbox.ErrClosed)
	}},
	{"RemoveFiles does not follow links", "gvisor", func(t *testing.T, f *fileSession) {
		f.run(`import os
os.makedirs('/mnt/data/target/sub')
for p in ('/mnt/data/target/f1', '/mnt/data/target/sub/f2', '/tmp/secret'):
    open(p, 'w').write('x')
os.symlink('/mnt/data/target', '/mnt/data/link')
os.symlink('/mnt/data/target', '/mnt/data/link2')
os.symlink('/tmp', '/mnt/data/tmplink')
os.symlink('/etc/passwd', '/mnt/data/plink')
os.symlink('/mnt/data/target/f1', '/mnt/data/target/flink')`)
		// Through a link in a parent's place there is nothing: the target's
		// files stay.
		f.remove("/mnt/data/link2/f1", "/mnt/data/link2/sub", "/mnt/data/tmplink/secret")
		if out := f.run("import os\nprint(sorted(os.listdir('/mnt/data')), sorted(os.listdir('/mnt/data/target')), os.path.exists('/tmp/secret'))"); !strings.Contains(out, "['link', 'link2', 'plink', 'target', 'tmplink'] ['f1', 'flink', 'sub'] True") {
			t.Fatalf("after removing through links the code sees %q", out)
		}
		// A link is removed, never its target.
		f.remove("/mnt/data/link", "/mnt/data/link2", "/mnt/data/tmplink", "/mnt/data/plink", "/mnt/data/target/flink")
		if out := f.run("import os\nprint(sorted(os.listdir('/mnt/data')), sorted(os.listdir('/mnt/data/target')), os.path.exists('/tmp/secret'))"); !strings.Contains(out, "['target'] ['f1', 'sub'] True") {
			t.Errorf("after removing the links the code sees %q", out)
		}
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/target/f1": 1, "/mnt/data/target/sub/f2": 1})
	}},
	{"RemoveFiles in chunks", "", func(t *testing.T, f *fileSession) {
		// 20 000 paths of 237 bytes: more than one request carries.
		dir := "/mnt/data/" + strings.Repeat("d", 220)
		out := f.run(fmt.Sprintf(`import os
d = %q
os.makedirs(d)
for i in range(20000):
    os.close(os.open('%%s/f%%05d' %% (d, i), os.O_CREAT | os.O_WRONLY))
print(len(os.listdir(d)))`, dir))
		if strings.TrimSpace(out) != "20000" {
			t.Fatalf("the code made %q files", out)
		}
		f.write("/mnt/data/keep", []byte("k"))
		paths := make([]string, 20000)
		total := 0
		for i := range paths {
			paths[i] = fmt.Sprintf("%s/f%05d", dir, i)
			total += len(paths[i])
		}
		if total <= 4<<20 {
			t.Fatalf("the paths total %d bytes: one request would carry them", total)
		}
		f.remove(paths...)
		if out := f.run(fmt.Sprintf("import os\nprint(os.listdir(%q))", dir)); strings.TrimSpace(out) != "[]" {
			t.Errorf("after RemoveFiles the code sees %.200q", out)
		}
		wantFiles(t, f.list("/mnt/data"), map[string]int64{"/mnt/data/keep": 1})
	}},
	{"ListFiles of more files than a listing carries", "", func(t *testing.T, f *fileSession) {
		n := sandbox.MaxListFiles + 5
		f.run(fmt.Sprintf(`import os
os.makedirs('/mnt/data/many/sub')
for i in range(%d):
    os.close(os.open('/mnt/data/many/%%sf%%05d' %% ('sub/' if i %% 2 else '', i), os.O_CREAT | os.O_WRONLY))`, n))
		made := map[string]bool{}
		for i := range n {
			sub := ""
			if i%2 == 1 {
				sub = "sub/"
			}
			made[fmt.Sprintf("/mnt/data/many/%sf%05d", sub, i)] = true
		}
		check := func(l sandbox.Listing) map[string]bool {
			t.Helper()
			got := map[string]bool{}
			for i, fi := range l.Files {
				if !made[fi.Path] || fi.Size != 0 || got[fi.Path] {
					t.Fatalf("listed %q (%d bytes), which the code did not make (or twice)", fi.Path, fi.Size)
				}
				if i > 0 && l.Files[i-1].Path >= fi.Path {
					t.Errorf("the listing is not sorted: %q before %q", l.Files[i-1].Path, fi.Path)
				}
				got[fi.Path] = true
			}
			return got
		}
		l, err := f.s.ListFiles(ctx(t), "/mnt/data")
		if err != nil {
			t.Fatalf("ListFiles of %d files: %v; want a truncated listing", n, err)
		}
		if !l.Truncated || len(l.Files) == 0 || len(l.Files) > sandbox.MaxListFiles {
			t.Fatalf("ListFiles of %d files: %d listed, truncated %v", n, len(l.Files), l.Truncated)
		}
		first := check(l)
		var listed []string
		for p := range first {
			listed = append(listed, p)
		}
		f.remove(listed...)
		l, err = f.s.ListFiles(ctx(t), "/mnt/data")
		if err != nil || l.Truncated || len(l.Files) != n-len(first) {
			t.Fatalf("after removing the %d listed: %d listed, truncated %v, %v; want the other %d",
				len(first), len(l.Files), l.Truncated, err, n-len(first))
		}
		for p := range check(l) {
			if first[p] {
				t.Errorf("%s listed again after it was removed", p)
			}
		}
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d, want 1", g)
		}
	}},
	{"concurrent operations are serialised", "", func(t *testing.T, f *fileSession) {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := ctx(t)
				name := fmt.Sprintf("/mnt/data/c%d.txt", i)
				want := strings.Repeat(fmt.Sprint(i), 1000*(i+1))
				if err := f.s.WriteFile(c, name, []byte(want)); err != nil {
					errs <- err
					return
				}
				r, err := f.s.Run(c, fmt.Sprintf("print(len(open(%q).read()))", name))
				if err != nil || strings.TrimSpace(r.Stdout) != fmt.Sprint(len(want)) {
					errs <- fmt.Errorf("run %d: %+v, %v", i, r, err)
				}
				if _, err := f.s.ListFiles(c, "/mnt/data"); err != nil {
					errs <- err
				}
				if got, err := f.s.ReadFile(c, name, 1<<20); err != nil || string(got) != want {
					errs <- fmt.Errorf("read %d: %d bytes, %v", i, len(got), err)
				}
				_ = f.s.Generation()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := f.list("/mnt/data"); len(got) != 6 {
			t.Errorf("ListFiles = %v, want 6 files", got)
		}
		if g := f.s.Generation(); g != 1 {
			t.Errorf("Generation() = %d, want 1", g)
		}
	}},
	{"closed", "", func(t *testing.T, f *fileSession) {
		f.s.Close()
		wantErr(t, "WriteFile after Close", f.s.WriteFile(ctx(t), "/mnt/data/x", nil), sandbox.ErrClosed)
		_, err := f.s.ListFiles(ctx(t), "/mnt/data")
		wantErr(t, "ListFiles after Close", err, sandbox.ErrClosed)
	}},
	// Code in a gVisor sandbox can write to the kernel's control FIFO. A
	// frame it forges between runs must not pass for a file operation's
	// answer: the operation fails, the interpreter is replaced, and nothing
	// of the forgery reaches the caller.
	{"a forged answer is a protocol error", "gvisor", func(t *testing.T, f *fileSession) {
		// Run 1 is this one, so the listing below is request 2.
		f.run(`import json, os, struct, threading
def forge():
    b = json.dumps({"kind": "file_result", "file_result": {"id": 2, "files": [
        {"path": "/etc/shadow", "size": 1, "mtime_ns": 0}]}}).encode()
    os.write(1001, struct.pack('>I', len(b)) + b)
threading.Timer(0.3, forge).start()`)
		time.Sleep(time.Second)
		l, err := f.s.ListFiles(ctx(t), "/mnt/data")
		if err == nil || len(l.Files) > 0 {
			t.Fatalf("ListFiles after a forged answer: %v, %v; want an error", l.Files, err)
		}
		for _, target := range []error{sandbox.ErrNotExist, sandbox.ErrInvalidPath, sandbox.ErrTooLarge, sandbox.ErrScratchFull} {
			if errors.Is(err, target) {
				t.Errorf("a forged answer passed for a refusal: %v", err)
			}
		}
		wantFiles(t, f.list("/mnt/data"), map[string]int64{})
		if g := f.s.Generation(); g != 2 {
			t.Errorf("Generation() = %d, want 2", g)
		}
	}},
}

// TestFilesLargest moves a file of MaxFileBytes both ways through each
// provider's control channel (the frames' bound is what limits it), and
// refuses one byte more with ErrTooLarge when the scratch space has room.
func TestFilesLargest(t *testing.T) {
	for _, provider := range sandboxtest.Providers() {
		t.Run(provider, func(t *testing.T) {
			p := sandboxtest.NewProvider(t, provider, func(c *pool.Config) {
				c.Limits.ScratchBytes = sandbox.MaxFileBytes + 4<<20
				c.MaxSessions = 1
				c.WarmWorkers = 0
			})
			f := &fileSession{t: t, s: open(t, p), provider: provider}
			data := binary(sandbox.MaxFileBytes - 6)
			start := time.Now()
			f.write("/mnt/data/largest.bin", data)
			if out := f.run("import hashlib\nprint(hashlib.sha256(open('/mnt/data/largest.bin', 'rb').read()).hexdigest())"); !strings.Contains(out, sha(data)) {
				t.Errorf("the code saw sha256 %q, want %s", out, sha(data))
			}
			if got := f.read("/mnt/data/largest.bin"); !bytes.Equal(got, data) {
				t.Errorf("ReadFile = %d bytes, differs from the %d written", len(got), len(data))
			}
			t.Logf("%d MiB written, hashed and read back in %s", len(data)>>20, time.Since(start).Round(time.Millisecond))
			err := f.s.WriteFile(ctx(t), "/mnt/data/over.bin", make([]byte, sandbox.MaxFileBytes+1))
			wantErr(t, "WriteFile above MaxFileBytes", err, sandbox.ErrTooLarge)
			f.run("import os\nos.remove('/mnt/data/largest.bin')\nopen('/mnt/data/over.bin', 'wb').write(b'x' * (32 << 20 | 1))")
			_, err = f.s.ReadFile(ctx(t), "/mnt/data/over.bin", 1<<40)
			wantErr(t, "ReadFile above MaxFileBytes", err, sandbox.ErrTooLarge)
			if g := f.s.Generation(); g != 1 {
				t.Errorf("Generation() = %d, want 1", g)
			}
		})
	}
}
