package checkpoint_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
)

func newKeeper(t *testing.T, root, origin string, key []byte, maxBytes int) *checkpoint.Keeper {
	return checkpointtest.Keeper(t, root, key, origin, maxBytes)
}

// TestKeeper: what one Keeper saves, another on the same store and key
// (another replica) loads; other owners, origins and keys get nothing
// usable; Drop and the size bound leave no checkpoint.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "ckpt")
	key := make([]byte, checkpoint.KeySize)
	_, _ = rand.Read(key)
	a := newKeeper(t, root, "wasm/1", key, 1<<20)
	b := newKeeper(t, root, "wasm/1", key, 1<<20)
	if _, _, err := a.Load(ctx, "alice", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load before any Save: %v, want ErrNone", err)
	}
	tok, err := a.Save(ctx, "alice", "cntr_1", []byte("state one"))
	if err != nil || len(tok) != 32 {
		t.Fatalf("Save: %q, %v", tok, err)
	}
	if got, gotTok, err := b.Load(ctx, "alice", "cntr_1"); err != nil || string(got) != "state one" || gotTok != tok {
		t.Fatalf("another replica's Load: %q %q, %v; want the state and token %q", got, gotTok, err, tok)
	}
	if head, running, err := b.Head(ctx, "alice", "cntr_1"); err != nil || head != tok || running {
		t.Fatalf("Head: %q %v, %v; want %q, not running", head, running, err, tok)
	}
	if err := b.MarkRunning(ctx, "alice", "cntr_1", tok); err != nil {
		t.Fatal(err)
	}
	if head, running, err := a.Head(ctx, "alice", "cntr_1"); err != nil || head != tok || !running {
		t.Fatalf("Head after MarkRunning: %q %v, %v; want %q, running", head, running, err, tok)
	}
	if _, _, err := b.Head(ctx, "alice", "cntr_9"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Head of a container never saved: %v, want ErrNone", err)
	}
	if _, _, err := b.Load(ctx, "mallory", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("another owner's Load: %v, want ErrNone (its own folder)", err)
	}
	// A blob moved into another owner's folder is refused, not used.
	moved := filepath.Join(root, "v1")
	var aliceDir string
	ents, _ := os.ReadDir(moved)
	for _, e := range ents {
		aliceDir = filepath.Join(moved, e.Name())
	}
	if _, err := a.Save(ctx, "mallory", "cntr_1", []byte("mallory's")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(aliceDir, "cntr_1", "state~"))
	if err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(moved)
	for _, e := range ents {
		if p := filepath.Join(moved, e.Name()); p != aliceDir {
			if err := os.WriteFile(filepath.Join(p, "cntr_1", "state~"), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := a.Load(ctx, "mallory", "cntr_1"); !errors.Is(err, checkpoint.ErrRefused) {
		t.Fatalf("alice's checkpoint in mallory's folder: %v, want ErrRefused", err)
	}
	other := make([]byte, checkpoint.KeySize)
	_, _ = rand.Read(other)
	for name, k := range map[string]*checkpoint.Keeper{
		"another origin": newKeeper(t, root, "wasm/2", key, 0),
		"another key":    newKeeper(t, root, "wasm/1", other, 0),
	} {
		if _, _, err := k.Load(ctx, "alice", "cntr_1"); !errors.Is(err, checkpoint.ErrRefused) {
			t.Errorf("%s: %v, want ErrRefused", name, err)
		}
	}
	if _, err := a.Save(ctx, "alice", "cntr_1", make([]byte, 2<<20)); !errors.Is(err, checkpoint.ErrTooLarge) {
		t.Fatalf("Save above max_bytes: %v, want ErrTooLarge", err)
	}
	if _, _, err := a.Load(ctx, "alice", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("after a state too large, the older checkpoint is still there (%v): it would restore stale state", err)
	}
	if _, err := a.Save(ctx, "alice", "cntr_2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := a.Drop(ctx, "alice", "cntr_2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Load(ctx, "alice", "cntr_2"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load after Drop: %v, want ErrNone", err)
	}
	if _, err := a.Save(ctx, "alice", "../x", []byte("x")); err == nil {
		t.Fatal("a container id that climbs out of the store was accepted")
	}
}

// TestKeeperMetrics: saves and loads are counted by result.
func TestKeeperMetrics(t *testing.T) {
	ctx := context.Background()
	key := make([]byte, checkpoint.KeySize)
	_, _ = rand.Read(key)
	root := t.TempDir()
	k := newKeeper(t, root, "wasm/1", key, 1<<10)
	reg := prometheus.NewRegistry()
	if err := k.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	_, _ = k.Save(ctx, "o", "cntr_1", []byte("small"))
	_, _ = k.Save(ctx, "o", "cntr_2", make([]byte, 2<<10))
	_, _, _ = k.Load(ctx, "o", "cntr_1")
	_, _, _ = k.Load(ctx, "o", "cntr_2")
	files, _ := filepath.Glob(filepath.Join(root, "v1", "*", "cntr_1", "state~"))
	if len(files) != 1 {
		t.Fatalf("the checkpoint's file: %v", files)
	}
	if err := os.WriteFile(files[0], []byte("cicp tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _ = k.Load(ctx, "o", "cntr_1")
	for metric, want := range map[string]string{
		`codeinterp_checkpoint_loads_total{result="refused"}`:   "1",
		`codeinterp_checkpoint_saves_total{result="saved"}`:     "1",
		`codeinterp_checkpoint_saves_total{result="too_large"}`: "1",
		`codeinterp_checkpoint_loads_total{result="loaded"}`:    "1",
		`codeinterp_checkpoint_loads_total{result="none"}`:      "1",
	} {
		if got := scrape(t, reg, metric); got != want {
			t.Errorf("%s = %q, want %s", metric, got, want)
		}
	}
}

// scrape returns one sample's value as the exposition format prints it.
func scrape(t *testing.T, reg *prometheus.Registry, metric string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, metric+" "); ok {
			return v
		}
	}
	return ""
}
