package checkpoint

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadKeyConfigured(t *testing.T) {
	want := newKey(t)
	got, err := LoadKey(base64.StdEncoding.EncodeToString(want)+"\n", "")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("LoadKey: %v", err)
	}
	for _, tc := range []struct{ configured, why string }{
		{"not base64!", "not base64"},
		{base64.StdEncoding.EncodeToString(make([]byte, 16)), "16 bytes, want 32"},
	} {
		if _, err := LoadKey(tc.configured, ""); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("LoadKey(%q): %v, want an error saying %q", tc.configured, err, tc.why)
		}
	}
	if _, err := LoadKey("", ""); err == nil {
		t.Error("no key and no key file: accepted")
	}
}

// TestLoadKeyFile: made once with mode 0600 (its directory 0700), read
// back the same, the same for servers starting at once; refused when others
// may read it or it is the wrong size.
func TestLoadKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "checkpoint.key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := LoadKey("", path)
			if err != nil {
				t.Errorf("LoadKey: %v", err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) || len(k) != KeySize {
			t.Fatal("servers starting at once ended with different keys")
		}
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %#o", p, fi.Mode().Perm(), err, want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".key-*")); len(left) != 0 {
		t.Errorf("temporary key files left behind: %v", left)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey("", path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key file: %v, want refused", err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey("", short); err == nil || !strings.Contains(err.Error(), "holds 5 bytes") {
		t.Errorf("a short key file: %v, want refused", err)
	}
}
