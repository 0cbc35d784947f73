package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox"
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
