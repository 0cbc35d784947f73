package wire

import (
	"strings"
	"testing"
)

// TestCheckFileResult: whatever a kind let through, an answer beyond the
// request's bounds is a protocol failure, never data.
func TestCheckFileResult(t *testing.T) {
	list := &FileRequest{ID: 7, Path: "/mnt/data", Max: 2, MaxPath: 64, MaxPathTotal: 100}
	get := &FileRequest{ID: 7, Path: "/mnt/data/x", Max: 4}
	rm := &FileRequest{ID: 7, Paths: []string{"/mnt/data/x", "/tmp/y"}}
	cases := []struct {
		name string
		kind string
		req  *FileRequest
		r    *FileResult
		ok   bool
	}{
		{"list ok", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/a", Size: 1}}}, true},
		{"wrong id", KindList, list, &FileResult{ID: 6}, false},
		{"outside the directory", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/etc/passwd"}}}, false},
		{"the directory's sibling", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/database"}}}, false},
		{"unclean", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/../etc"}}}, false},
		{"too many", KindList, list, &FileResult{ID: 7, Files: make([]FileEntry, 3)}, false},
		{"negative size", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/a", Size: -1}}}, false},
		{"truncated", KindList, list, &FileResult{ID: 7, Truncated: true, Files: []FileEntry{{Path: "/mnt/data/a"}, {Path: "/mnt/data/b"}}}, true},
		{"truncated, too many", KindList, list, &FileResult{ID: 7, Truncated: true, Files: make([]FileEntry, 3)}, false},
		{"truncated, too many path bytes", KindList, list, &FileResult{ID: 7, Truncated: true, Files: []FileEntry{
			{Path: "/mnt/data/" + strings.Repeat("a", 50)}, {Path: "/mnt/data/" + strings.Repeat("b", 50)}}}, false},
		{"too many path bytes", KindList, list, &FileResult{ID: 7, Files: []FileEntry{
			{Path: "/mnt/data/" + strings.Repeat("a", 50)}, {Path: "/mnt/data/" + strings.Repeat("b", 50)}}}, false},
		{"truncated, outside the directory", KindList, list, &FileResult{ID: 7, Truncated: true, Files: []FileEntry{{Path: "/etc/passwd"}}}, false},
		{"a truncated refusal", KindList, list, &FileResult{ID: 7, Error: FileErrIO, Truncated: true}, false},
		{"a truncated read", KindGet, get, &FileResult{ID: 7, Data: []byte("ab"), Size: 2, Truncated: true}, false},
		{"read ok", KindGet, get, &FileResult{ID: 7, Data: []byte("abcd"), Size: 4}, true},
		{"read above max", KindGet, get, &FileResult{ID: 7, Data: []byte("abcde"), Size: 5}, false},
		{"refusal", KindGet, get, &FileResult{ID: 7, Error: FileErrNotExist}, true},
		{"refusal with data", KindGet, get, &FileResult{ID: 7, Error: FileErrNotExist, Data: []byte("x")}, false},
		{"unknown code", KindGet, get, &FileResult{ID: 7, Error: "eperm"}, false},
		{"remove ok", KindRemove, rm, &FileResult{ID: 7}, true},
		{"remove refused", KindRemove, rm, &FileResult{ID: 7, Error: FileErrIO, Detail: "EBUSY"}, true},
		{"remove with data", KindRemove, rm, &FileResult{ID: 7, Data: []byte("x")}, false},
		{"remove with files", KindRemove, rm, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/x"}}}, false},
		{"remove with a size", KindRemove, rm, &FileResult{ID: 7, Size: 3}, false},
		{"remove truncated", KindRemove, rm, &FileResult{ID: 7, Truncated: true}, false},
		{"a path listed twice", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/a"}, {Path: "/mnt/data/a"}}}, false},
		{"a path above MaxPath", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/" + strings.Repeat("a", 55)}}}, false},
		{"a path at MaxPath", KindList, list, &FileResult{ID: 7, Files: []FileEntry{{Path: "/mnt/data/" + strings.Repeat("a", 54)}}}, true},
		{"a read whose size is not its data's", KindGet, get, &FileResult{ID: 7, Data: []byte("ab"), Size: 3}, false},
		{"a detail at the bound", KindGet, get, &FileResult{ID: 7, Error: FileErrIO, Detail: strings.Repeat("d", MaxDetail)}, true},
		{"a detail above the bound", KindGet, get, &FileResult{ID: 7, Error: FileErrIO, Detail: strings.Repeat("d", MaxDetail+1)}, false},
		{"an unknown operation", "chmod", get, &FileResult{ID: 7}, false},
	}
	for _, c := range cases {
		if err := CheckFileResult(c.kind, c.req, c.r); (err == nil) != c.ok {
			t.Errorf("%s: %v; want ok=%v", c.name, err, c.ok)
		}
	}
}
