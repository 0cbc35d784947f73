package buildcache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNewest(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, manifest bool, age time.Duration) {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if manifest {
			m := filepath.Join(d, "MANIFEST")
			if err := os.WriteFile(m, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			when := time.Now().Add(-age)
			if err := os.Chtimes(m, when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := Newest(root, "x-"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("empty root: %v, want ErrNotBuilt", err)
	}
	mk("x-old", true, time.Hour)
	mk("x-new", true, time.Minute)
	mk("x-unfinished", false, 0)
	mk("y-newer", true, 0)
	got, err := Newest(root, "x-")
	if err != nil || got != filepath.Join(root, "x-new") {
		t.Fatalf("Newest = %q, %v; want x-new", got, err)
	}
	if _, err := Newest(filepath.Join(root, "missing"), "x-"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("missing root: %v, want ErrNotBuilt", err)
	}
}

func TestRoot(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	tests := []struct {
		env  map[string]string
		want string
		err  bool
	}{
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/codeinterp", false},
		{map[string]string{"HOME": "/h"}, "/h/.cache/codeinterp", false},
		{map[string]string{"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/codeinterp", false},
		{map[string]string{}, "", true},
	}
	for _, tt := range tests {
		got, err := Root(env(tt.env))
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("Root(%v) = %q, %v; want %q (error %v)", tt.env, got, err, tt.want, tt.err)
		}
	}
}

func TestFind(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("CODEINTERP_TEST_DIR", "")
	if _, err := Find("CODEINTERP_TEST_DIR", "x-"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("nothing built: %v, want ErrNotBuilt", err)
	}
	built := filepath.Join(cache, "codeinterp", "x-1")
	if err := os.MkdirAll(built, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(built, "MANIFEST"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("CODEINTERP_TEST_DIR", "x-"); err != nil || got != built {
		t.Fatalf("Find = %q, %v; want %q", got, err, built)
	}
	t.Setenv("CODEINTERP_TEST_DIR", "/elsewhere")
	if got, err := Find("CODEINTERP_TEST_DIR", "x-"); err != nil || got != "/elsewhere" {
		t.Fatalf("Find with the variable set = %q, %v; want /elsewhere", got, err)
	}
}

// TestNewestMatching: a newer build of another version (a worktree with
// another pin sharing the cache) is passed over for the one accepted.
func TestNewestMatching(t *testing.T) {
	root := t.TempDir()
	mk := func(name, manifest string, age time.Duration) {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		m := filepath.Join(d, "MANIFEST")
		if err := os.WriteFile(m, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(m, when, when); err != nil {
			t.Fatal(err)
		}
	}
	mk("r-pinned", "tool v1\n", time.Hour)
	mk("r-other", "tool v2\n", time.Minute)
	isV1 := func(m []byte) bool { return string(m) == "tool v1\n" }
	if got, err := NewestMatching(root, "r-", isV1); err != nil || got != filepath.Join(root, "r-pinned") {
		t.Fatalf("NewestMatching = %q, %v; want r-pinned", got, err)
	}
	if got, err := NewestMatching(root, "r-", nil); err != nil || got != filepath.Join(root, "r-other") {
		t.Fatalf("NewestMatching(nil) = %q, %v; want the newest, r-other", got, err)
	}
	none := func([]byte) bool { return false }
	if _, err := NewestMatching(root, "r-", none); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("none accepted: %v, want ErrNotBuilt", err)
	}
}
