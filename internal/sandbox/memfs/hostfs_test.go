package memfs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

func TestHostHelpers(t *testing.T) {
	fsys := New(1 << 20)
	if err := fsys.MkdirAll("/in/nested/", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll("in/nested", 0o755); err != nil {
		t.Fatalf("MkdirAll on existing dirs: %v", err)
	}
	if err := fsys.WriteFile("in/nested/data.csv", []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile("in/big.bin", []byte(strings.Repeat("z", 2*pageSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fsys, "guest.txt", "from the guest")
	if err := fsys.MkdirAll("guest.txt/x", 0o755); !errors.Is(err, experimentalsys.ENOTDIR) {
		t.Fatalf("MkdirAll through a file: %v", err)
	}

	if err := fstest.TestFS(fsys.IOFS(), "in/nested/data.csv", "in/big.bin", "guest.txt"); err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(fsys.IOFS(), "in/nested/data.csv")
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if _, err := fs.Stat(fsys.IOFS(), "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file error %v does not match fs.ErrNotExist", err)
	}
	var walked []string
	if err := fs.WalkDir(fsys.IOFS(), ".", func(p string, d fs.DirEntry, err error) error {
		walked = append(walked, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := ".,guest.txt,in,in/big.bin,in/nested,in/nested/data.csv"; strings.Join(walked, ",") != want {
		t.Fatalf("walk %v", walked)
	}
}

func TestWriteFileBudget(t *testing.T) {
	fsys := New(InodeCost + 10)
	if err := fsys.WriteFile("f", []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := fsys.WriteFile("f", []byte("0123456789A"), 0o644)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("oversized WriteFile: %v", err)
	}
	if got := readAll(t, fsys, "f"); got != "0123456789" {
		t.Fatalf("failed WriteFile changed the file: %q", got)
	}
	if err := fsys.WriteFile("f", []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, fsys, InodeCost+5)
	if err := fsys.WriteFile("g", nil, 0o644); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteFile without room for an inode: %v", err)
	}
	if err := fsys.WriteFile(".", nil, 0o644); !errors.Is(err, experimentalsys.EISDIR) {
		t.Fatalf("WriteFile on a directory: %v", err)
	}
}
