package memfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// buildGuest compiles testdata/guest for wasip1 with the Go toolchain that
// runs the tests.
func buildGuest(t *testing.T) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the integration test compiles its WASI guest and needs the go command on PATH: %v", err)
	}
	out := filepath.Join(t.TempDir(), "guest.wasm")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", out, "./testdata/guest")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the wasip1 guest: %v\n%s", err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// TestGuestOnWazero mounts two file systems sharing one budget at /tmp and
// /mnt/data in a real wazero runtime and runs a WASI program against them.
func TestGuestOnWazero(t *testing.T) {
	wasm := buildGuest(t)
	ctx := t.Context()

	const maxBytes = 1 << 20
	b := NewBudget(maxBytes)
	tmp, data := b.NewFS(), b.NewFS()
	cfg := wazero.NewFSConfig()
	cfg = Mount(cfg, "/tmp", tmp)
	cfg = Mount(cfg, "/mnt/data", data)

	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	var stdout, stderr bytes.Buffer
	_, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().
		WithName("guest").
		WithArgs("guest").
		WithStdout(&stdout).
		WithStderr(&stderr).
		WithFSConfig(cfg))
	var exit *sys.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
		t.Fatalf("guest failed: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}

	// Before the fill the guest holds four inodes (/tmp/work, b.txt with
	// "alpha+beta", out.csv with "x,y\n1,2\n", fill.bin); fill.bin takes the
	// rest, to the byte.
	fill := maxBytes - 4*InodeCost - len("alpha+beta") - len("x,y\n1,2\n")
	want := strings.Join([]string{
		`mkdir /tmp/work: ok`,
		`write a.txt: ok`,
		`read a.txt: "alpha" ok`,
		`rename a.txt b.txt: ok`,
		`ls /tmp/work: b.txt ok`,
		`write out.csv: ok`,
		`stat renamed-away: ENOENT`,
		`rmdir non-empty: ENOTEMPTY`,
		`unlink dir: EISDIR`,
		`mkdir existing: EEXIST`,
		`create excl existing: EEXIST`,
		// wazero does not rename between two preopens.
		`rename across mounts: ENOSYS`,
		// No preopen covers /etc, so there is no descriptor to resolve it by.
		`write outside mounts: EBADF`,
		`open append: ok`,
		`append: ok`,
		`close append: ok`,
		`open b.txt: ok`,
		`seek: ok`,
		`read after seek: "ha+beta" ok`,
		`fstat: ok`,
		`stat b.txt: size=10 regular=true`,
		`close b.txt: ok`,
		`create fill.bin: ok`,
		// ErrNoSpace: wazero carries no ENOSPC, so the guest sees EIO.
		fmt.Sprintf(`fill: wrote %d then EIO`, fill),
		`stat fill.bin: ok`,
		`fill.bin size matches: true`,
		`create when full: EIO`,
		`mkdir when full: EIO`,
		`remove fill.bin: ok`,
		`create while unlinked fill.bin open: EIO`,
		`read unlinked: "ffff" ok`,
		`close fill.bin: ok`,
		`create after close: ok`,
		`ls /tmp: another work/ ok`,
		`ls /mnt/data: out.csv ok`,
		`done`,
	}, "\n") + "\n"
	if got := stdout.String(); got != want {
		t.Fatalf("guest transcript differs\n got:\n%s\nwant:\n%s\nstderr:\n%s", got, want, &stderr)
	}

	st := b.Stats()
	wantUsed := int64(4*InodeCost + len("alpha+beta") + len("x,y\n1,2\n") + len("ok"))
	if st.Used != wantUsed || st.Inodes != 4 {
		t.Fatalf("after the run: %+v, want used %d and 4 inodes", st, wantUsed)
	}
	if st.NoSpace < 4 {
		t.Fatalf("NoSpace = %d; the guest met at least four refusals", st.NoSpace)
	}
	got, err := fs.ReadFile(data.IOFS(), "out.csv")
	if err != nil || string(got) != "x,y\n1,2\n" {
		t.Fatalf("host view of /mnt/data/out.csv: %q, %v", got, err)
	}
}
