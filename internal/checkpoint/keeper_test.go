package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/dir"
	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
)

func newKeeper(t *testing.T, root, origin string, key []byte, maxBytes int) *checkpoint.Keeper {
	return checkpointtest.Keeper(t, root, key, origin, maxBytes)
}

func newTestKey() []byte {
	key := make([]byte, checkpoint.KeySize)
	_, _ = rand.Read(key)
	return key
}

// folder is the directory of owner's container under a dir store's root.
func folder(t *testing.T, root, owner, container string) string {
	t.Helper()
	// The owner's hash is the Keeper's business: find the folder holding
	// a head for the container, made by a save of that owner only.
	matches, _ := filepath.Glob(filepath.Join(root, "v1", "*", container, "head~"))
	var found []string
	for _, m := range matches {
		found = append(found, filepath.Dir(m))
	}
	if len(found) != 1 {
		t.Fatalf("folders of %s's %s: %v", owner, container, found)
	}
	return found[0]
}

// states lists the state files in a folder.
func states(t *testing.T, dirPath string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dirPath, "state*~"))
	return m
}

// TestKeeper: what one Keeper saves, another on the same store and key
// (another replica) loads; other owners get nothing usable; another key
// or origin gets a foreign checkpoint (kept, never used); Drop leaves no
// checkpoint.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "ckpt")
	key := newTestKey()
	a := newKeeper(t, root, "wasm/1", key, 1<<20)
	b := newKeeper(t, root, "wasm/1", key, 1<<20)
	if _, _, err := a.Load(ctx, "alice", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load before any Save: %v, want ErrNone", err)
	}
	tok, err := a.Save(ctx, "alice", "cntr_1", 0, []byte("state one"))
	if err != nil || len(tok) != 32 {
		t.Fatalf("Save: %q, %v", tok, err)
	}
	if got, gotTok, err := b.Load(ctx, "alice", "cntr_1"); err != nil || string(got) != "state one" || gotTok != tok {
		t.Fatalf("another replica's Load: %q %q, %v; want the state and token %q", got, gotTok, err, tok)
	}
	if head, running, err := b.Head(ctx, "alice", "cntr_1"); err != nil || head != tok || running {
		t.Fatalf("Head: %q %v, %v; want %q, not running", head, running, err, tok)
	}
	if err := b.MarkRunning(ctx, "alice", "cntr_1", tok, 0); err != nil {
		t.Fatal(err)
	}
	if head, running, err := a.Head(ctx, "alice", "cntr_1"); err != nil || head != tok || !running {
		t.Fatalf("Head after MarkRunning: %q %v, %v; want %q, running", head, running, err, tok)
	}
	if err := b.MarkRunning(ctx, "alice", "cntr_1", strings.Repeat("0", 32), 0); err == nil {
		t.Fatal("MarkRunning of a token that is not the latest was accepted")
	}
	if err := b.MarkRunning(ctx, "alice", "cntr_9", tok, 0); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("MarkRunning of a container never saved: %v, want ErrNone", err)
	}
	if _, _, err := b.Head(ctx, "alice", "cntr_9"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Head of a container never saved: %v, want ErrNone", err)
	}
	if _, _, err := b.Load(ctx, "mallory", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("another owner's Load: %v, want ErrNone (its own folder)", err)
	}
	// A folder copied into another owner's is refused, not used.
	aliceDir := folder(t, root, "alice", "cntr_1")
	if _, err := a.Save(ctx, "mallory", "cntr_1", 0, []byte("mallory's")); err != nil {
		t.Fatal(err)
	}
	var malloryDir string
	ents, _ := os.ReadDir(filepath.Join(root, "v1"))
	for _, e := range ents {
		if p := filepath.Join(root, "v1", e.Name(), "cntr_1"); p != aliceDir {
			malloryDir = p
		}
	}
	if err := os.RemoveAll(malloryDir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(malloryDir, os.DirFS(aliceDir)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Load(ctx, "mallory", "cntr_1"); !errors.Is(err, checkpoint.ErrRefused) || errors.Is(err, checkpoint.ErrForeign) {
		t.Fatalf("alice's checkpoint in mallory's folder: %v, want ErrRefused", err)
	}
	for name, k := range map[string]*checkpoint.Keeper{
		"another origin": newKeeper(t, root, "wasm/2", key, 0),
		"another key":    newKeeper(t, root, "wasm/1", newTestKey(), 0),
	} {
		if _, _, err := k.Load(ctx, "alice", "cntr_1"); !errors.Is(err, checkpoint.ErrForeign) || errors.Is(err, checkpoint.ErrRefused) {
			t.Errorf("%s: %v, want ErrForeign and not ErrRefused (callers drop what is refused)", name, err)
		}
	}
	if _, err := a.Save(ctx, "alice", "cntr_2", 0, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := a.Drop(ctx, "alice", "cntr_2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Load(ctx, "alice", "cntr_2"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load after Drop: %v, want ErrNone", err)
	}
	if _, err := a.Save(ctx, "alice", "../x", 0, []byte("x")); err == nil {
		t.Fatal("a container id that climbs out of the store was accepted")
	}
	// One state per container: each save removes the one it replaced.
	for range 3 {
		if _, err := a.Save(ctx, "alice", "cntr_1", 0, []byte("again")); err != nil {
			t.Fatal(err)
		}
	}
	if s := states(t, aliceDir); len(s) != 1 {
		t.Fatalf("after four saves of a container, its states: %v", s)
	}
}

// TestKeeperTooLargeKeepsCheckpoint: a state above max_bytes is
// ErrTooLarge and leaves the checkpoint as it was; the caller decides.
func TestKeeperTooLargeKeepsCheckpoint(t *testing.T) {
	ctx := context.Background()
	k := newKeeper(t, t.TempDir(), "wasm/1", newTestKey(), 1<<20)
	tok, err := k.Save(ctx, "alice", "cntr_1", 3, []byte("state one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Save(ctx, "alice", "cntr_1", 3, make([]byte, 2<<20)); !errors.Is(err, checkpoint.ErrTooLarge) {
		t.Fatalf("Save above max_bytes: %v, want ErrTooLarge", err)
	}
	if got, gotTok, err := k.Load(ctx, "alice", "cntr_1"); err != nil || string(got) != "state one" || gotTok != tok {
		t.Fatalf("after a state too large: %q %q, %v; want the checkpoint before it", got, gotTok, err)
	}
}

// TestKeeperFencing: a write under a fence below the head's is refused
// (ErrFenced), counted, and changes nothing Load or Head return; equal
// and higher fences proceed; fence 0 (no cluster) is never refused and
// never lowers the head's fence; MarkRunning raises it.
func TestKeeperFencing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	k := newKeeper(t, root, "wasm/1", newTestKey(), 1<<20)
	reg := prometheus.NewRegistry()
	if err := k.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	type view struct {
		state, token, head string
		running            bool
	}
	look := func() view {
		t.Helper()
		st, tok, err := k.Load(ctx, "o", "cntr_1")
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		head, running, err := k.Head(ctx, "o", "cntr_1")
		if err != nil {
			t.Fatalf("Head: %v", err)
		}
		return view{string(st), tok, head, running}
	}
	save := func(fence uint64, state string) string {
		t.Helper()
		tok, err := k.Save(ctx, "o", "cntr_1", fence, []byte(state))
		if err != nil {
			t.Fatalf("Save under fence %d: %v", fence, err)
		}
		return tok
	}
	fenced := func(what string, err error, before view) {
		t.Helper()
		if !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("%s: %v, want ErrFenced", what, err)
		}
		if after := look(); after != before {
			t.Fatalf("%s changed the checkpoint: %+v, was %+v", what, after, before)
		}
	}
	tok5 := save(5, "under 5")
	v := look()
	if v != (view{"under 5", tok5, tok5, false}) {
		t.Fatalf("after a save under 5: %+v", v)
	}
	_, err := k.Save(ctx, "o", "cntr_1", 3, []byte("under 3"))
	fenced("Save under 3 after 5", err, v)
	fenced("MarkRunning under 3 after 5", k.MarkRunning(ctx, "o", "cntr_1", tok5, 3), v)
	tok5b := save(5, "under 5 again") // an equal fence: the same holder
	if err := k.MarkRunning(ctx, "o", "cntr_1", tok5b, 5); err != nil {
		t.Fatal(err)
	}
	v = look()
	if v != (view{"under 5 again", tok5b, tok5b, true}) {
		t.Fatalf("after MarkRunning under 5: %+v", v)
	}
	// No cluster: never refused, and the head keeps fence 5.
	tok0 := save(0, "unfenced")
	v = look()
	_, err = k.Save(ctx, "o", "cntr_1", 4, []byte("under 4"))
	fenced("Save under 4 after 5 and an unfenced save", err, v)
	// A new holder marks the state it runs: older holders are fenced
	// out from then on, before its first save.
	if err := k.MarkRunning(ctx, "o", "cntr_1", tok0, 9); err != nil {
		t.Fatal(err)
	}
	v = look()
	_, err = k.Save(ctx, "o", "cntr_1", 7, []byte("under 7"))
	fenced("Save under 7 after MarkRunning under 9", err, v)
	fenced("MarkRunning under 8 after MarkRunning under 9", k.MarkRunning(ctx, "o", "cntr_1", tok0, 8), v)
	tok12 := save(12, "under 12")
	if v := look(); v != (view{"under 12", tok12, tok12, false}) {
		t.Fatalf("after a save under 12: %+v", v)
	}
	if s := states(t, folder(t, root, "o", "cntr_1")); len(s) != 1 || !strings.Contains(s[0], "state-000000000000000c-") {
		t.Fatalf("states left: %v, want the one of fence 12", s)
	}
	for metric, want := range map[string]string{
		`codeinterp_checkpoint_fenced_writes_total{op="save"}`:         "3",
		`codeinterp_checkpoint_fenced_writes_total{op="mark_running"}`: "2",
		`codeinterp_checkpoint_saves_total{result="fenced"}`:           "3",
	} {
		if got := scrape(t, reg, metric); got != want {
			t.Errorf("%s = %q, want %s", metric, got, want)
		}
	}
}

// TestKeeperRefusals: tampered and truncated checkpoints, and a head
// that does not agree with its state, are refused (ErrRefused: never
// usable); another key's and another origin's are foreign (ErrForeign:
// kept); the two never overlap, and loads count them apart.
func TestKeeperRefusals(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	key := newTestKey()
	k := newKeeper(t, root, "wasm/1", key, 1<<20)
	reg := prometheus.NewRegistry()
	if err := k.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	saveFolder := func(container string) (string, string) {
		t.Helper()
		tok, err := k.Save(ctx, "o", container, 4, []byte("the state of "+container))
		if err != nil {
			t.Fatal(err)
		}
		f := folder(t, root, "o", container)
		s := states(t, f)
		if len(s) != 1 {
			t.Fatalf("states: %v", s)
		}
		return tok, s[0]
	}
	refused := func(what, container string) {
		t.Helper()
		_, _, err := k.Load(ctx, "o", container)
		if !errors.Is(err, checkpoint.ErrRefused) || errors.Is(err, checkpoint.ErrForeign) {
			t.Errorf("%s: %v, want ErrRefused only", what, err)
		}
	}
	_, state := saveFolder("cntr_flip")
	b, _ := os.ReadFile(state)
	b[len(b)-40] ^= 0x01
	_ = os.WriteFile(state, b, 0o600)
	refused("a flipped byte", "cntr_flip")

	_, state = saveFolder("cntr_cut")
	b, _ = os.ReadFile(state)
	_ = os.WriteFile(state, b[:len(b)-1], 0o600)
	refused("truncated", "cntr_cut")

	// The head names an older state of the same container (a rollback
	// by someone who can write the store): the tokens disagree.
	_, old := saveFolder("cntr_rollback")
	oldBytes, _ := os.ReadFile(old)
	if _, err := k.Save(ctx, "o", "cntr_rollback", 4, []byte("newer")); err != nil {
		t.Fatal(err)
	}
	f := folder(t, root, "o", "cntr_rollback")
	_ = os.WriteFile(states(t, f)[0], oldBytes, 0o600)
	refused("a head naming another save's state", "cntr_rollback")

	// A head naming something outside the folder's states.
	saveFolder("cntr_escape")
	head := filepath.Join(folder(t, root, "o", "cntr_escape"), "head~")
	hb, _ := os.ReadFile(head)
	hb = bytes.Replace(hb, []byte(`"state":"state-`), []byte(`"state":"../cntr_flip/state-`), 1)
	_ = os.WriteFile(head, hb, 0o600)
	refused("a head naming a state outside its folder", "cntr_escape")

	saveFolder("cntr_ok")
	for name, other := range map[string]*checkpoint.Keeper{
		"another origin": newKeeper(t, root, "wasm/2", key, 0),
		"another key":    newKeeper(t, root, "wasm/1", newTestKey(), 0),
	} {
		if err := other.Instrument(prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := other.Load(ctx, "o", "cntr_ok"); !errors.Is(err, checkpoint.ErrForeign) || errors.Is(err, checkpoint.ErrRefused) {
			t.Errorf("%s: %v, want ErrForeign only", name, err)
		}
	}
	if _, _, err := k.Load(ctx, "o", "cntr_ok"); err != nil {
		t.Fatalf("the untouched checkpoint: %v", err)
	}
	if got := scrape(t, reg, `codeinterp_checkpoint_loads_total{result="refused"}`); got != "4" {
		t.Errorf("refused loads counted: %q, want 4", got)
	}
}

// TestKeeperOversizeBlob: a head or state far above what the Keeper
// reads (sparse files of 8 GiB) is an error, not an allocation of its
// size; what Save refuses to write is refused on read too.
func TestKeeperOversizeBlob(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	k := newKeeper(t, root, "wasm/1", newTestKey(), 1<<20)
	for _, c := range []string{"cntr_state", "cntr_head"} {
		if _, err := k.Save(ctx, "o", c, 0, []byte("small")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(states(t, folder(t, root, "o", "cntr_state"))[0], 8<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(folder(t, root, "o", "cntr_head"), "head~"), 8<<30); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := k.Load(ctx, "o", "cntr_state")
	if !errors.Is(err, checkpoint.ErrTooLarge) || !errors.Is(err, blob.ErrTooLarge) || errors.Is(err, checkpoint.ErrRefused) {
		t.Errorf("Load of an 8 GiB state: %v, want ErrTooLarge (not refused: a replica with a larger bound may have written it)", err)
	}
	if _, _, err := k.Load(ctx, "o", "cntr_head"); !errors.Is(err, blob.ErrTooLarge) {
		t.Errorf("Load under an 8 GiB head: %v, want ErrTooLarge", err)
	}
	if _, _, err := k.Head(ctx, "o", "cntr_head"); !errors.Is(err, blob.ErrTooLarge) {
		t.Errorf("Head of an 8 GiB head: %v, want ErrTooLarge", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
		t.Errorf("reading oversize blobs allocated %d bytes", n)
	}
}

// TestKeeperLoadRetriesWhenStateReplaced: a Load that read the head just
// before another replica's save replaced the state it names reads the
// head again and returns the newer checkpoint.
func TestKeeperLoadRetriesWhenStateReplaced(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	key := newTestKey()
	writer := newKeeper(t, root, "wasm/1", key, 0)
	if _, err := writer.Save(ctx, "o", "cntr_1", 1, []byte("older")); err != nil {
		t.Fatal(err)
	}
	var newer string
	st := &hooked{Store: dirStore(t, root)}
	st.afterGet = func(key string) {
		if strings.HasSuffix(key, "/head") && newer == "" {
			tok, err := writer.Save(ctx, "o", "cntr_1", 2, []byte("newer"))
			if err != nil {
				t.Error(err)
			}
			newer = tok
		}
	}
	reader := checkpoint.NewKeeper(sealer(t, key), st, "wasm/1", 0)
	got, tok, err := reader.Load(ctx, "o", "cntr_1")
	if err != nil || string(got) != "newer" || tok != newer {
		t.Fatalf("Load across a save: %q %q, %v; want the newer checkpoint %q", got, tok, err, newer)
	}
	// A state gone for good (swept while its head was kept): none.
	for _, s := range states(t, folder(t, root, "o", "cntr_1")) {
		_ = os.Remove(s)
	}
	if _, _, err := writer.Load(ctx, "o", "cntr_1"); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load of a head whose state is gone: %v, want ErrNone", err)
	}
}

// TestKeeperReadsFormat1: folders the Keeper wrote before format 2
// (testdata/format1: a head "<token>" or "<token> running", the state at
// "state", sealed without an origin id or a fence) load, say whether
// they run, take a MarkRunning, and are replaced by the next save, which
// removes the old state.
func TestKeeperReadsFormat1(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "format1"))); err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{0x42}, checkpoint.KeySize)
	k := newKeeper(t, root, "wasm/format-1", key, 0)
	for _, c := range []struct {
		container, token, state string
		running                 bool
	}{
		{"cntr_idle", "3cdbc100736a4c2577423077d39d7a1a", "format 1 state, idle", false},
		{"cntr_running", "a1c78e27462b813598e40734b23b9a12", "format 1 state, running", true},
	} {
		got, tok, err := k.Load(ctx, "alice", c.container)
		if err != nil || string(got) != c.state || tok != c.token {
			t.Fatalf("%s: Load %q %q, %v; want %q %q", c.container, got, tok, err, c.state, c.token)
		}
		head, running, err := k.Head(ctx, "alice", c.container)
		if err != nil || head != c.token || running != c.running {
			t.Fatalf("%s: Head %q %v, %v", c.container, head, running, err)
		}
	}
	if err := k.MarkRunning(ctx, "alice", "cntr_idle", "3cdbc100736a4c2577423077d39d7a1a", 2); err != nil {
		t.Fatalf("MarkRunning of a format 1 checkpoint: %v", err)
	}
	if got, _, err := k.Load(ctx, "alice", "cntr_idle"); err != nil || string(got) != "format 1 state, idle" {
		t.Fatalf("Load after MarkRunning: %q, %v", got, err)
	}
	if _, running, err := k.Head(ctx, "alice", "cntr_idle"); err != nil || !running {
		t.Fatalf("Head after MarkRunning: %v, %v", running, err)
	}
	if _, err := k.Save(ctx, "alice", "cntr_idle", 1, []byte("x")); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("Save under a fence below MarkRunning's: %v, want ErrFenced", err)
	}
	tok, err := k.Save(ctx, "alice", "cntr_running", 3, []byte("format 2 state"))
	if err != nil {
		t.Fatal(err)
	}
	if got, gotTok, err := k.Load(ctx, "alice", "cntr_running"); err != nil || string(got) != "format 2 state" || gotTok != tok {
		t.Fatalf("Load after a save over format 1: %q %q, %v", got, gotTok, err)
	}
	f := folder(t, root, "alice", "cntr_running")
	if _, err := os.Stat(filepath.Join(f, "state~")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the format 1 state after a save replaced it: %v", err)
	}
	// Another origin's format 1 checkpoint cannot be told from a tampered
	// one: foreign, kept.
	other := newKeeper(t, root, "wasm/format-2", key, 0)
	if _, _, err := other.Load(ctx, "alice", "cntr_idle"); !errors.Is(err, checkpoint.ErrForeign) {
		t.Fatalf("a format 1 checkpoint of another origin: %v, want ErrForeign", err)
	}
}

// TestKeeperMetrics: saves and loads are counted by result.
func TestKeeperMetrics(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	k := newKeeper(t, root, "wasm/1", newTestKey(), 1<<10)
	reg := prometheus.NewRegistry()
	if err := k.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	_, _ = k.Save(ctx, "o", "cntr_1", 0, []byte("small"))
	_, _ = k.Save(ctx, "o", "cntr_2", 0, make([]byte, 2<<10))
	_, _, _ = k.Load(ctx, "o", "cntr_1")
	_, _, _ = k.Load(ctx, "o", "cntr_2")
	files := states(t, folder(t, root, "o", "cntr_1"))
	if len(files) != 1 {
		t.Fatalf("the checkpoint's file: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 0x01
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _ = k.Load(ctx, "o", "cntr_1")
	b[4] = 9 // a format version of a later build
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _ = k.Load(ctx, "o", "cntr_1")
	for metric, want := range map[string]string{
		`codeinterp_checkpoint_loads_total{result="refused"}`:   "1",
		`codeinterp_checkpoint_loads_total{result="foreign"}`:   "1",
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

func sealer(t *testing.T, key []byte) *checkpoint.Sealer {
	t.Helper()
	s, err := checkpoint.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dirStore(t *testing.T, root string) blob.Store {
	t.Helper()
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// hooked is a blob.Store that calls its hooks around the store's calls:
// to pause a writer between its reads and its head's write.
type hooked struct {
	blob.Store
	afterGet  func(key string) // after Get and GetVersion
	beforePut func(key string) // before Put and PutIf
}

func (h *hooked) Get(ctx context.Context, key string, max int64) ([]byte, error) {
	b, err := h.Store.Get(ctx, key, max)
	if h.afterGet != nil {
		h.afterGet(key)
	}
	return b, err
}

func (h *hooked) GetVersion(ctx context.Context, key string, max int64) ([]byte, string, error) {
	b, v, err := h.Store.GetVersion(ctx, key, max)
	if h.afterGet != nil {
		h.afterGet(key)
	}
	return b, v, err
}

func (h *hooked) Put(ctx context.Context, key string, data []byte) error {
	if h.beforePut != nil {
		h.beforePut(key)
	}
	return h.Store.Put(ctx, key, data)
}

func (h *hooked) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if h.beforePut != nil {
		h.beforePut(key)
	}
	return h.Store.PutIf(ctx, key, data, ifMatch)
}

// pauseOnce returns a beforePut hook that, on the first head write,
// says so on paused and waits for resume.
func pauseOnce(paused chan<- struct{}, resume <-chan struct{}) func(string) {
	var once sync.Once
	return func(key string) {
		if strings.HasSuffix(key, "/head") {
			once.Do(func() {
				paused <- struct{}{}
				<-resume
			})
		}
	}
}

func waitPaused(t *testing.T, paused <-chan struct{}) {
	t.Helper()
	select {
	case <-paused:
	case <-time.After(time.Minute):
		t.Fatal("the paused writer never reached its head's write")
	}
}

// racingStore is a store for the racing tests, and how to list the keys
// under its prefix (to count the states left behind).
type racingStore struct {
	store blob.Store
	keys  func(t *testing.T, prefix string) []string
}

// testRacingSaves: two replicas saving one container under different
// fences, in every order their reads and head writes can interleave, and
// racing freely: the head ends naming the higher fence's state, the
// lower one's save never changes what Load returns once the higher one
// is in, and no state is left behind but the head's.
func testRacingSaves(t *testing.T, newStore func(t *testing.T) racingStore) {
	ctx := context.Background()
	key := newTestKey()
	stateKeys := func(t *testing.T, rs racingStore) []string {
		var out []string
		for _, k := range rs.keys(t, "v1/") {
			if strings.Contains(k, "/state") {
				out = append(out, k)
			}
		}
		return out
	}
	t.Run("the stale writer pauses before its head write", func(t *testing.T) {
		rs := newStore(t)
		paused, resume := make(chan struct{}), make(chan struct{})
		stale := checkpoint.NewKeeper(sealer(t, key), &hooked{Store: rs.store, beforePut: pauseOnce(paused, resume)}, "wasm/1", 0)
		fresh := checkpoint.NewKeeper(sealer(t, key), rs.store, "wasm/1", 0)
		if _, err := fresh.Save(ctx, "o", "cntr_1", 2, []byte("first")); err != nil {
			t.Fatal(err)
		}
		staleErr := make(chan error, 1)
		go func() {
			_, err := stale.Save(ctx, "o", "cntr_1", 3, []byte("stale"))
			staleErr <- err
		}()
		waitPaused(t, paused) // its state is written; its head write waits
		tok, err := fresh.Save(ctx, "o", "cntr_1", 4, []byte("fresh"))
		if err != nil {
			t.Fatal(err)
		}
		close(resume)
		if err := <-staleErr; !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("the stale writer's save: %v, want ErrFenced", err)
		}
		if got, gotTok, err := fresh.Load(ctx, "o", "cntr_1"); err != nil || string(got) != "fresh" || gotTok != tok {
			t.Fatalf("Load: %q %q, %v; want the fresh writer's", got, gotTok, err)
		}
		if s := stateKeys(t, rs); len(s) != 1 {
			t.Fatalf("states left: %v", s)
		}
	})
	t.Run("the fresh writer pauses before its head write", func(t *testing.T) {
		rs := newStore(t)
		paused, resume := make(chan struct{}), make(chan struct{})
		fresh := checkpoint.NewKeeper(sealer(t, key), &hooked{Store: rs.store, beforePut: pauseOnce(paused, resume)}, "wasm/1", 0)
		stale := checkpoint.NewKeeper(sealer(t, key), rs.store, "wasm/1", 0)
		type result struct {
			tok string
			err error
		}
		freshDone := make(chan result, 1)
		go func() {
			tok, err := fresh.Save(ctx, "o", "cntr_1", 6, []byte("fresh"))
			freshDone <- result{tok, err}
		}()
		waitPaused(t, paused)
		// The stale writer gets in first (its lease was still valid when
		// it read the head): its save is the checkpoint until the fresh
		// one's lands.
		staleTok, err := stale.Save(ctx, "o", "cntr_1", 5, []byte("stale"))
		if err != nil {
			t.Fatal(err)
		}
		if _, tok, _ := stale.Load(ctx, "o", "cntr_1"); tok != staleTok {
			t.Fatalf("Load between: token %q, want the stale writer's %q", tok, staleTok)
		}
		close(resume)
		r := <-freshDone
		if r.err != nil {
			t.Fatalf("the fresh writer's save, after losing the head's compare-and-set: %v", r.err)
		}
		if got, tok, err := stale.Load(ctx, "o", "cntr_1"); err != nil || string(got) != "fresh" || tok != r.tok {
			t.Fatalf("Load: %q %q, %v; want the fresh writer's", got, tok, err)
		}
		if _, err := stale.Save(ctx, "o", "cntr_1", 5, []byte("stale again")); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("the stale writer's next save: %v, want ErrFenced", err)
		}
		if s := stateKeys(t, rs); len(s) != 1 {
			t.Fatalf("states left: %v", s)
		}
	})
	t.Run("free race", func(t *testing.T) {
		rs := newStore(t)
		a := checkpoint.NewKeeper(sealer(t, key), rs.store, "wasm/1", 0)
		b := checkpoint.NewKeeper(sealer(t, key), rs.store, "wasm/1", 0)
		lowerWon := 0
		for round := range 12 {
			low, high := uint64(2*round+1), uint64(2*round+2)
			var lowTok, highTok string
			var lowErr, highErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				lowTok, lowErr = a.Save(ctx, "o", "cntr_1", low, fmt.Appendf(nil, "round %d, fence %d", round, low))
			}()
			go func() {
				defer wg.Done()
				<-start
				highTok, highErr = b.Save(ctx, "o", "cntr_1", high, fmt.Appendf(nil, "round %d, fence %d", round, high))
			}()
			close(start)
			wg.Wait()
			if highErr != nil {
				t.Fatalf("round %d: the higher fence's save: %v", round, highErr)
			}
			switch {
			case lowErr == nil:
				lowerWon++ // it was in before the higher one: replaced since
				if lowTok == highTok {
					t.Fatal("two saves with one token")
				}
			case !errors.Is(lowErr, checkpoint.ErrFenced):
				t.Fatalf("round %d: the lower fence's save: %v, want success or ErrFenced", round, lowErr)
			}
			got, tok, err := a.Load(ctx, "o", "cntr_1")
			if want := fmt.Sprintf("round %d, fence %d", round, high); err != nil || string(got) != want || tok != highTok {
				t.Fatalf("round %d: Load %q %q, %v; want %q %q", round, got, tok, err, want, highTok)
			}
			if s := stateKeys(t, rs); len(s) != 1 {
				t.Fatalf("round %d: states left: %v", round, s)
			}
		}
		t.Logf("the lower fence's save went in first (then replaced) in %d of 12 rounds, was fenced in the others", lowerWon)
	})
}

// TestKeeperRacingSavesDir: testRacingSaves on a directory store.
func TestKeeperRacingSavesDir(t *testing.T) {
	testRacingSaves(t, func(t *testing.T) racingStore {
		root := t.TempDir()
		return racingStore{store: dirStore(t, root), keys: func(t *testing.T, prefix string) []string {
			var keys []string
			_ = filepath.WalkDir(filepath.Join(root, prefix), func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(p, "~") {
					rel, _ := filepath.Rel(root, strings.TrimSuffix(p, "~"))
					keys = append(keys, filepath.ToSlash(rel))
				}
				return nil
			})
			return keys
		}}
	})
}

// lostAnswer is a store whose first head write lands but answers with
// err: the client retried a request whose answer was lost (412: the
// retry found the first try's write), or gave up (a timeout).
type lostAnswer struct {
	blob.Store
	err  error
	once sync.Once
}

func (l *lostAnswer) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	v, err := l.Store.PutIf(ctx, key, data, ifMatch)
	if err == nil && strings.HasSuffix(key, "/head") {
		l.once.Do(func() { v, err = "", l.err })
	}
	return v, err
}

// TestKeeperSaveLostAnswer: a save whose head write landed but whose
// answer said otherwise never removes the state it made live: with a 412
// it finds its own token in the head and succeeds; with an error of
// unknown outcome it returns the error and the checkpoint still loads.
func TestKeeperSaveLostAnswer(t *testing.T) {
	ctx := context.Background()
	key := newTestKey()
	for name, answer := range map[string]error{
		"412 after a retry": fmt.Errorf("%w: put head: PreconditionFailed", blob.ErrPrecondition),
		"a timeout":         context.DeadlineExceeded,
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			plain := checkpoint.NewKeeper(sealer(t, key), dirStore(t, root), "wasm/1", 0)
			if _, err := plain.Save(ctx, "o", "cntr_1", 1, []byte("before")); err != nil {
				t.Fatal(err)
			}
			lossy := checkpoint.NewKeeper(sealer(t, key), &lostAnswer{Store: dirStore(t, root), err: answer}, "wasm/1", 0)
			tok, err := lossy.Save(ctx, "o", "cntr_1", 1, []byte("after"))
			if errors.Is(answer, blob.ErrPrecondition) != (err == nil) {
				t.Fatalf("Save: %q, %v", tok, err)
			}
			got, gotTok, err := plain.Load(ctx, "o", "cntr_1")
			if err != nil || string(got) != "after" || (tok != "" && gotTok != tok) {
				t.Fatalf("Load: %q %q, %v; want the save that landed", got, gotTok, err)
			}
			if tok != "" {
				if s := states(t, folder(t, root, "o", "cntr_1")); len(s) != 1 {
					t.Fatalf("states left: %v", s)
				}
			}
		})
	}
}

// TestCheckpointtestLayout: the helpers other packages' tests use to
// look into a directory store follow the Keeper's layout.
func TestCheckpointtestLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	k := newKeeper(t, root, "wasm/1", newTestKey(), 0)
	if _, _, ok := checkpointtest.Head(root, "cntr_1"); ok || len(checkpointtest.States(root, "cntr_1")) != 0 {
		t.Fatal("a head or states before any save")
	}
	tok, err := k.Save(ctx, "o", "cntr_1", 0, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, running, ok := checkpointtest.Head(root, "cntr_1"); !ok || got != tok || running {
		t.Fatalf("Head: %q %v %v, want %q, not running", got, running, ok, tok)
	}
	if err := k.MarkRunning(ctx, "o", "cntr_1", tok, 0); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := checkpointtest.Head(root, "cntr_1"); !running {
		t.Fatal("Head after MarkRunning: not running")
	}
	if s := checkpointtest.States(root, "cntr_1"); len(s) != 1 {
		t.Fatalf("States: %v", s)
	}
	format1 := filepath.Join("testdata", "format1")
	if got, running, ok := checkpointtest.Head(format1, "cntr_running"); !ok || got != "a1c78e27462b813598e40734b23b9a12" || !running {
		t.Fatalf("Head of a format 1 folder: %q %v %v", got, running, ok)
	}
	if s := checkpointtest.States(format1, "cntr_running"); len(s) != 1 {
		t.Fatalf("States of a format 1 folder: %v", s)
	}
}
