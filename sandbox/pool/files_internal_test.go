package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
)

func TestCleanPath(t *testing.T) {
	ok := map[string]string{
		"/mnt/data/x.csv":       "/mnt/data/x.csv",
		"/mnt/data//a/./b/":     "/mnt/data/a/b",
		"/mnt/data/a/../b":      "/mnt/data/b",
		"/tmp/t":                "/tmp/t",
		"/mnt/data/ünïcode.txt": "/mnt/data/ünïcode.txt",
	}
	for in, want := range ok {
		got, err := cleanPath(in, false)
		if err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "x.csv", "mnt/data/x", "/etc/x", "/mnt/data/../etc/passwd", "/tmp/../mnt/data/../../etc/x",
		"/mnt/datax/y", "/mnt/data", "/tmp/", "/", "/mnt", "/mnt/data/a\x00b", "/mnt/data/\xff",
		"/mnt/data/" + strings.Repeat("a", sandbox.MaxPathBytes),
	} {
		if got, err := cleanPath(in, false); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("cleanPath(%q) = %q, %v; want ErrInvalidPath", in, got, err)
		}
	}
	if got, err := cleanPath("/mnt/data/", true); err != nil || got != "/mnt/data" {
		t.Errorf("cleanPath(/mnt/data/, root) = %q, %v", got, err)
	}
}

// TestCheckFileResult: whatever a kind let through, an answer beyond the
// request's bounds is a protocol failure, never data.
func TestCheckFileResult(t *testing.T) {
	list := &wire.FileRequest{ID: 7, Path: "/mnt/data", Max: 2, MaxPath: 64, MaxPathTotal: 100}
	get := &wire.FileRequest{ID: 7, Path: "/mnt/data/x", Max: 4}
	rm := &wire.FileRequest{ID: 7, Paths: []string{"/mnt/data/x", "/tmp/y"}}
	cases := []struct {
		name string
		kind string
		req  *wire.FileRequest
		r    *wire.FileResult
		ok   bool
	}{
		{"list ok", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/mnt/data/a", Size: 1}}}, true},
		{"wrong id", wire.KindList, list, &wire.FileResult{ID: 6}, false},
		{"outside the directory", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/etc/passwd"}}}, false},
		{"the directory's sibling", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/mnt/database"}}}, false},
		{"unclean", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/mnt/data/../etc"}}}, false},
		{"too many", wire.KindList, list, &wire.FileResult{ID: 7, Files: make([]wire.FileEntry, 3)}, false},
		{"negative size", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/mnt/data/a", Size: -1}}}, false},
		{"truncated", wire.KindList, list, &wire.FileResult{ID: 7, Truncated: true, Files: []wire.FileEntry{{Path: "/mnt/data/a"}, {Path: "/mnt/data/b"}}}, true},
		{"truncated, too many", wire.KindList, list, &wire.FileResult{ID: 7, Truncated: true, Files: make([]wire.FileEntry, 3)}, false},
		{"truncated, too many path bytes", wire.KindList, list, &wire.FileResult{ID: 7, Truncated: true, Files: []wire.FileEntry{
			{Path: "/mnt/data/" + strings.Repeat("a", 50)}, {Path: "/mnt/data/" + strings.Repeat("b", 50)}}}, false},
		{"too many path bytes", wire.KindList, list, &wire.FileResult{ID: 7, Files: []wire.FileEntry{
			{Path: "/mnt/data/" + strings.Repeat("a", 50)}, {Path: "/mnt/data/" + strings.Repeat("b", 50)}}}, false},
		{"truncated, outside the directory", wire.KindList, list, &wire.FileResult{ID: 7, Truncated: true, Files: []wire.FileEntry{{Path: "/etc/passwd"}}}, false},
		{"a truncated refusal", wire.KindList, list, &wire.FileResult{ID: 7, Error: wire.FileErrIO, Truncated: true}, false},
		{"a truncated read", wire.KindGet, get, &wire.FileResult{ID: 7, Data: []byte("ab"), Size: 2, Truncated: true}, false},
		{"read ok", wire.KindGet, get, &wire.FileResult{ID: 7, Data: []byte("abcd"), Size: 4}, true},
		{"read above max", wire.KindGet, get, &wire.FileResult{ID: 7, Data: []byte("abcde"), Size: 5}, false},
		{"refusal", wire.KindGet, get, &wire.FileResult{ID: 7, Error: wire.FileErrNotExist}, true},
		{"refusal with data", wire.KindGet, get, &wire.FileResult{ID: 7, Error: wire.FileErrNotExist, Data: []byte("x")}, false},
		{"unknown code", wire.KindGet, get, &wire.FileResult{ID: 7, Error: "eperm"}, false},
		{"remove ok", wire.KindRemove, rm, &wire.FileResult{ID: 7}, true},
		{"remove refused", wire.KindRemove, rm, &wire.FileResult{ID: 7, Error: wire.FileErrIO, Detail: "EBUSY"}, true},
		{"remove with data", wire.KindRemove, rm, &wire.FileResult{ID: 7, Data: []byte("x")}, false},
		{"remove with files", wire.KindRemove, rm, &wire.FileResult{ID: 7, Files: []wire.FileEntry{{Path: "/mnt/data/x"}}}, false},
		{"remove with a size", wire.KindRemove, rm, &wire.FileResult{ID: 7, Size: 3}, false},
		{"remove truncated", wire.KindRemove, rm, &wire.FileResult{ID: 7, Truncated: true}, false},
	}
	for _, c := range cases {
		if err := checkFileResult(c.kind, c.req, c.r); (err == nil) != c.ok {
			t.Errorf("%s: %v; want ok=%v", c.name, err, c.ok)
		}
	}
}
