package worker

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// TestFileOps drives the worker's side of the file operations on a memfs
// scratch space directly: the bounds of a listing, what it leaves out, and
// that a put that does not fit leaves nothing behind. Every answer passes
// the check the server makes of it.
func TestFileOps(t *testing.T) {
	w := &worker{scratch: newScratch(64 << 10)}
	do := func(kind string, req wire.FileRequest) *wire.FileResult {
		t.Helper()
		req.ID = 9
		r := w.file(kind, &req)
		if r.ID != 9 {
			t.Fatalf("answer for request %d", r.ID)
		}
		if err := wire.CheckFileResult(kind, &req, r); err != nil {
			t.Errorf("%s %s: the server would refuse the answer: %v", kind, req.Path, err)
		}
		return r
	}
	list := func(dir string, max int64) *wire.FileResult {
		return do(wire.KindList, wire.FileRequest{Path: dir, Max: max, MaxPath: 64, MaxPathTotal: 1 << 20})
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/a/b.bin", Data: []byte{0, 1, 0xff}}); r.Error != "" {
		t.Fatalf("put: %+v", r)
	}
	if r := do(wire.KindGet, wire.FileRequest{Path: "/mnt/data/a/b.bin", Max: 3}); r.Error != "" || !bytes.Equal(r.Data, []byte{0, 1, 0xff}) || r.Size != 3 {
		t.Errorf("get: %+v", r)
	}
	if r := do(wire.KindGet, wire.FileRequest{Path: "/mnt/data/a/b.bin", Max: 2}); r.Error != wire.FileErrTooLarge || r.Size != 3 || r.Data != nil {
		t.Errorf("get above max: %+v", r)
	}
	for _, p := range []string{"/mnt/data/a", "/mnt/data/nope", "/mnt/data/a/b.bin/c"} {
		if r := do(wire.KindGet, wire.FileRequest{Path: p, Max: 10}); r.Error != wire.FileErrNotExist && r.Error != wire.FileErrNotRegular {
			t.Errorf("get %s: %+v", p, r)
		}
	}
	// Names the answer cannot carry are left out: not UTF-8, too long.
	for _, name := range []string{"/mnt/data/\xff.txt", "/mnt/data/" + string(bytes.Repeat([]byte("n"), 60))} {
		f, _, rel, _ := w.scratch.resolve(name)
		if err := f.WriteFile(rel, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := list("/mnt/data", 10)
	if r.Error != "" || len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/a/b.bin" || r.Files[0].Size != 3 || r.Files[0].ModTimeNanos == 0 {
		t.Errorf("list: %+v", r)
	}
	// More than the answer carries: some of them, and truncated.
	if r := list("/mnt/data", 0); r.Error != "" || len(r.Files) != 0 || !r.Truncated {
		t.Errorf("list above max: %+v", r)
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/a/c.bin", Data: []byte("c")}); r.Error != "" {
		t.Fatalf("put: %+v", r)
	}
	if r := list("/mnt/data", 1); r.Error != "" || len(r.Files) != 1 || !r.Truncated {
		t.Errorf("list of 2 files, at most 1: %+v", r)
	}
	if r := do(wire.KindList, wire.FileRequest{Path: "/mnt/data", Max: 10, MaxPath: 64, MaxPathTotal: 20}); r.Error != "" || len(r.Files) != 1 || !r.Truncated {
		t.Errorf("list of 2 files, at most 20 bytes of paths: %+v", r)
	}
	if r := list("/mnt/data", 2); r.Error != "" || len(r.Files) != 2 || r.Truncated {
		t.Errorf("list of 2 files, at most 2: %+v", r)
	}
	if r := do(wire.KindRemove, wire.FileRequest{Paths: []string{"/mnt/data/a/c.bin"}}); r.Error != "" {
		t.Fatalf("remove: %+v", r)
	}
	if r := list("/mnt/data/a/b.bin", 10); r.Error != wire.FileErrInvalid {
		t.Errorf("list of a file: %+v", r)
	}
	if r := list("/tmp", 10); r.Error != "" || len(r.Files) != 0 {
		t.Errorf("list of an empty /tmp: %+v", r)
	}
	// Does not fit: the file and the directories made for it are gone.
	before := w.scratch.budget.Used()
	if r := do(wire.KindPut, wire.FileRequest{Path: "/tmp/x/y/z.bin", Data: make([]byte, 63<<10)}); r.Error != wire.FileErrNoSpace {
		t.Errorf("put beyond the budget: %+v", r)
	}
	if used := w.scratch.budget.Used(); used != before {
		t.Errorf("a refused put left %d bytes charged", used-before)
	}
	if _, errno := w.scratch.tmp.Stat("x"); errno == 0 {
		t.Error("a refused put left its directory behind")
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/etc/passwd"}); r.Error != wire.FileErrInvalid {
		t.Errorf("put outside the scratch space: %+v", r)
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/" + strings.Repeat("n", 256) + "/x"}); r.Error != wire.FileErrInvalid {
		t.Errorf("put below a name too long: %+v", r)
	}
	// A refusal that names a long path says so in at most wire.MaxDetail
	// bytes, cut between characters.
	long := "/mnt/data/" + strings.Repeat("é", 100) + "/" + strings.Repeat("n", 256) + "/x"
	if r := do(wire.KindPut, wire.FileRequest{Path: long}); r.Error != wire.FileErrInvalid || len(r.Detail) > wire.MaxDetail ||
		!utf8.ValidString(r.Detail) || !strings.Contains(r.Detail, "éé") {
		t.Errorf("put below a long name too long: %+v", r)
	}
	// What stands in the way is replaced: a file where a parent must be,
	// a directory (with everything below it) where the file goes.
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/a/b.bin/c", Data: []byte("c")}); r.Error != "" {
		t.Errorf("put below a file: %+v", r)
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/a", Data: []byte("a")}); r.Error != "" {
		t.Errorf("put over a directory: %+v", r)
	}
	if r := list("/mnt/data", 10); r.Error != "" || len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/a" || r.Files[0].Size != 1 {
		t.Errorf("after the replacements: %+v", r)
	}
	if r := do(wire.KindPut, wire.FileRequest{Path: "/mnt/data/a/b.bin", Data: []byte{0, 1, 0xff}}); r.Error != "" {
		t.Fatalf("put: %+v", r)
	}

	// Remove: a tree whose names io/fs refuses (not UTF-8) goes whole, and
	// what has nothing at it is no error.
	before = w.scratch.budget.Used()
	for _, name := range []string{"t/\xffdir/f", "t/\xff", "t/sub/deeper/g"} {
		f, _, rel, _ := w.scratch.resolve("/mnt/data/" + name)
		if err := f.MkdirAll(rel[:strings.LastIndexByte(rel, '/')], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteFile(rel, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := do(wire.KindRemove, wire.FileRequest{Paths: []string{"/mnt/data/t", "/mnt/data/nope", "/mnt/data/a/b.bin/c", "/mnt/data/" + strings.Repeat("n", 300)}}); r.Error != "" {
		t.Errorf("remove: %+v", r)
	}
	if used := w.scratch.budget.Used(); used != before {
		t.Errorf("after removing the tree %d bytes are still charged", used-before)
	}
	if r := do(wire.KindRemove, wire.FileRequest{Paths: []string{"/mnt/data/a/b.bin", "/tmp"}}); r.Error != wire.FileErrInvalid {
		t.Errorf("remove of a root: %+v", r)
	}
	if r := do(wire.KindGet, wire.FileRequest{Path: "/mnt/data/a/b.bin", Max: 10}); r.Error != "" {
		t.Errorf("a refused remove removed a file: %+v", r)
	}
}
