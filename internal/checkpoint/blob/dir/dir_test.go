package dir_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
