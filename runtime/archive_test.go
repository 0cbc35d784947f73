package runtime_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchiveFromAptConfiguration: build-python-wasi.sh takes the Debian
// archive from the machine's apt configuration (one-line and deb822
// formats), skipping security/updates/backports suites, so operators
// behind a mirror or proxy are served by it.
func TestArchiveFromAptConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"deb822 as Debian 12 ships it", map[string]string{"sources.list.d/debian.sources": `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`}, "http://deb.debian.org/debian"},
		{"deb822, security stanza first", map[string]string{"sources.list.d/debian.sources": `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
URIs: https://mirror.example.org/debian/
Suites: bookworm
Components: main
`}, "https://mirror.example.org/debian"},
		{"one-line with options", map[string]string{"sources.list": `# a comment
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://proxy.internal:3142/debian bookworm main
deb http://security.debian.org/debian-security bookworm-security main
`}, "http://proxy.internal:3142/debian"},
		{"one-line, updates first", map[string]string{"sources.list.d/mirror.list": `deb http://m.example/debian bookworm-updates main
deb http://m.example/debian bookworm main contrib
`}, "http://m.example/debian"},
		{"nothing usable", map[string]string{"sources.list": "deb-src http://x.example/debian bookworm main\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			if err := os.MkdirAll(filepath.Join(etc, "sources.list.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "build-python-wasi.sh", "--print-archive")
			cmd.Env = append(os.Environ(), "APT_ETC="+etc)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := strings.TrimSuffix(strings.TrimSpace(string(out)), "/"); got != tc.want {
				t.Errorf("archive %q, want %q", got, tc.want)
			}
		})
	}
}
