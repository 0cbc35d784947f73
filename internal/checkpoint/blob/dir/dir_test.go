package dir_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/blobtest"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/dir"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := dir.New(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestModes: blobs are 0600 in 0700 directories (they are sealed, but
// still nobody else's business), and no temporary file is left.
func TestModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "blobs")
	s, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), "owner/cntr/1", []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", p, fi.Mode().Perm(), want)
		}
		if filepath.Base(p)[0] == '.' && p != root {
			t.Errorf("%s: a temporary file was left", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOversizeNotRead: a blob far above the bound (a sparse file of
// 8 GiB) is an error at once, not an allocation of its size.
func TestOversizeNotRead(t *testing.T) {
	root := filepath.Join(t.TempDir(), "blobs")
	s, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Put(ctx, "o/c/state", []byte("x")); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "o", "c", "state*"))
	if len(files) != 1 {
		t.Fatalf("the blob's file: %v", files)
	}
	if err := os.Truncate(files[0], 8<<30); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := s.Get(ctx, "o/c/state", 1<<20); !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("Get of 8 GiB bounded at 1 MiB: %v, want ErrTooLarge", err)
	}
	if _, _, err := s.GetVersion(ctx, "o/c/state", 1<<20); !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("GetVersion of 8 GiB bounded at 1 MiB: %v, want ErrTooLarge", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("refusing an oversize blob allocated %d bytes", n)
	}
}

// TestLockFiles: PutIf's lock files ("name~lock") are 0600, do not count
// as blobs, and go with DeletePrefix, or with a sweep once their key is
// gone, so that swept directories empty out.
func TestLockFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "blobs")
	s, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"v1/o/c1/head", "v1/o/c2/head"} {
		if _, err := s.PutIf(ctx, k, []byte("h"), ""); err != nil {
			t.Fatal(err)
		}
	}
	locks, _ := filepath.Glob(filepath.Join(root, "v1", "o", "*", "head~lock"))
	if len(locks) != 2 {
		t.Fatalf("lock files: %v", locks)
	}
	for _, l := range locks {
		if fi, err := os.Stat(l); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", l, fi.Mode(), err)
		}
	}
	if err := s.DeletePrefix(ctx, "v1/o/c1/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "v1", "o", "c1")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after DeletePrefix the directory is still there: %v", err)
	}
	// The lock file of a live key stays; of a deleted one, goes with the
	// sweep; not counted either way.
	if n, err := s.Sweep(ctx, "v1/", time.Now().Add(-time.Hour), nil); err != nil || n != 0 {
		t.Fatalf("Sweep of nothing old: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, "v1", "o", "c2", "head~lock")); err != nil {
		t.Fatalf("a live key's lock file was swept: %v", err)
	}
	if err := s.Delete(ctx, "v1/o/c2/head"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, "v1/", time.Now().Add(time.Hour), nil); err != nil || n != 0 {
		t.Fatalf("Sweep of a lock file only: %d removed, %v; want 0 blobs", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, "v1")); !errors.Is(err, fs.ErrNotExist) {
		left, _ := filepath.Glob(filepath.Join(root, "v1", "*", "*", "*"))
		t.Fatalf("after the sweep: %v left (%v)", left, err)
	}
	// A PutIf after all that makes its directory and lock again.
	if _, err := s.PutIf(ctx, "v1/o/c2/head", []byte("again"), ""); err != nil {
		t.Fatal(err)
	}
}
