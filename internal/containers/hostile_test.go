package containers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// The hostile corpus of the containers path: sequences of runs, kills and
// API calls a careless or hostile user makes, each of which lost, corrupted
// or bricked a container before. Every case runs on every provider. After
// each, the container still runs code, nothing the user made is gone, the
// logs stay within the output bound plus one note, and the model is told
// the truth about the files.

// hostileScratch is the scratch space of the corpus's sessions: big enough
// for the largest accepted upload and for a hundred thousand empty files
// on gVisor's tmpfs, small enough to fill.
const hostileScratch = 32 << 20

// hostileStderr is the corpus's stderr bound.
const hostileStderr = 16 << 10

// hostileEnv is one case's world: a fresh store and manager over the
// provider's shared pool, with the limits a server would put in force
// (config.Config.StoreLimits: what a session can hold).
type hostileEnv struct {
	t        *testing.T
	provider string
	st       *memory.Store
	m        *containers.Manager
	clock    *clock
	limits   store.Limits
	owner    string
	header   http.Header
}

type hostileCase struct {
	name string
	// limits adjusts the store's bounds before the manager starts.
	limits func(*store.Limits)
	run    func(e *hostileEnv)
}

func TestHostileContainers(t *testing.T) {
	for _, provider := range sandboxtest.Providers() {
		t.Run(provider, func(t *testing.T) {
			p := sandboxtest.NewProvider(t, provider, func(c *pool.Config) {
				c.Limits.ScratchBytes = hostileScratch
				c.Limits.StderrBytes = hostileStderr
				c.Limits.RunTimeout = 2 * time.Minute
				c.QueueWait = time.Minute
			})
			for _, tc := range hostileContainerCases() {
				t.Run(tc.name, func(t *testing.T) {
					e := newHostileEnv(t, provider, p, tc.limits)
					tc.run(e)
				})
			}
		})
	}
}

func newHostileEnv(t *testing.T, provider string, p sandbox.Provider, edit func(*store.Limits)) *hostileEnv {
	clk := &clock{t: time.Now()}
	l := store.DefaultLimits()
	// What a server puts in force for this scratch space (config's
	// StoreLimits): a file and a container hold what a session holds.
	capacity := sandbox.DataCapacity(hostileScratch, l.ContainerFiles)
	l.FileBytes = min(l.FileBytes, sandbox.MaxFileBytes, capacity)
	l.ContainerBytes = min(l.ContainerBytes, capacity)
	if edit != nil {
		edit(&l)
	}
	st := memory.New(l, clk.now)
	t.Cleanup(func() { st.Close() })
	files := api.StoreFetcher{Store: st, AuthHeaders: authHeaders(), Now: clk.now}
	m := containers.New(containers.Config{Now: clk.now, Files: files, MaxFileBytes: l.FileBytes}, st, p, nil)
	t.Cleanup(func() { m.Close() })
	owner, hdr := caller("sk-hostile")
	return &hostileEnv{t: t, provider: provider, st: st, m: m, clock: clk, limits: l, owner: owner, header: hdr}
}

// open opens a response's container: an explicit id, or auto when id is "".
func (e *hostileEnv) open(id string, fileIDs ...string) containers.Container {
	e.t.Helper()
	c, err := e.m.Open(context.Background(), containers.Spec{Owner: e.owner, Header: e.header, ID: id, FileIDs: fileIDs})
	if err != nil {
		e.t.Fatalf("open %q: %v", id, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// run runs code and checks the corpus's invariants on the result: no
// error, and stderr within its bound plus one note line.
func (e *hostileEnv) run(c containers.Container, code string) containers.RunResult {
	e.t.Helper()
	r, err := c.Run(context.Background(), code)
	if err != nil {
		e.t.Fatalf("run %.60q: %v", code, err)
	}
	if n := len(r.Stderr); n > hostileStderr+1024 {
		e.t.Errorf("run %.60q: stderr is %d bytes, more than the %d bound plus one note", code, n, hostileStderr)
	}
	notes := 0
	for _, line := range strings.Split(r.Stderr, "\n") {
		if strings.Contains(line, "not kept") {
			notes++
		}
	}
	if notes > 1 {
		e.t.Errorf("run %.60q: more than one note about files not kept:\n%.2000s", code, r.Stderr)
	}
	return r
}

// ok runs code that must complete.
func (e *hostileEnv) ok(c containers.Container, code string) containers.RunResult {
	e.t.Helper()
	r := e.run(c, code)
	if r.Outcome != sandbox.OutcomeCompleted {
		e.t.Fatalf("run %.60q: %s (%s)\nstdout: %.1000s\nstderr: %.2000s", code, r.Outcome, r.Detail, r.Stdout, r.Stderr)
	}
	return r
}

// respond is one response: open, run each code, close.
func (e *hostileEnv) respond(id string, codes ...string) []containers.RunResult {
	e.t.Helper()
	c := e.open(id)
	var out []containers.RunResult
	for _, code := range codes {
		out = append(out, e.ok(c, code))
	}
	if err := c.Close(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// paths is the container's files' paths in the store, sorted.
func (e *hostileEnv) paths(cid string) []string {
	e.t.Helper()
	files, err := e.containerFiles(cid)
	if err != nil {
		e.t.Fatalf("the container's files: %v", err)
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	slices.Sort(out)
	return out
}

func (e *hostileEnv) containerFiles(cid string) ([]store.File, error) {
	var all []store.File
	after := ""
	for {
		page, more, err := e.st.ListFiles(context.Background(), e.owner, cid, store.ListOptions{Limit: 100, Order: "asc", After: after})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if !more {
			return all, nil
		}
		after = page[len(page)-1].ID
	}
}

// upload stores a user's container file as POST /v1/containers/{id}/files does.
func (e *hostileEnv) upload(cid, name string, data []byte) store.File {
	e.t.Helper()
	f, err := e.st.PutFile(context.Background(), store.File{Owner: e.owner, ContainerID: cid, Path: "/mnt/data/" + name,
		Filename: name, Source: "user"}, data)
	if err != nil {
		e.t.Fatalf("upload %s: %v", name, err)
	}
	return f
}

// listing is what the code sees in /mnt/data: the sorted paths of its
// regular files, one a line.
const listing = `import os
_seen = sorted(os.path.join(d, n) for d, _, ns in os.walk('/mnt/data') for n in ns if os.path.isfile(os.path.join(d, n)))
print(len(_seen)); print('\n'.join(_seen[:20]))`

func (e *hostileEnv) wantListing(stdout string, want ...string) {
	e.t.Helper()
	got := strings.TrimSpace(stdout)
	exp := strings.TrimSpace(fmt.Sprintf("%d\n%s", len(want), strings.Join(want, "\n")))
	if got != exp {
		e.t.Errorf("/mnt/data as the code sees it:\n%s\nwant:\n%s", got, exp)
	}
}

func hostileContainerCases() []hostileCase {
	return []hostileCase{
		{name: "recycling at the quota spares a container named like an auto one", limits: func(l *store.Limits) { l.OwnerContainers = 4 },
			run: func(e *hostileEnv) {
				ctx := context.Background()
				// The user's own four containers, one named as auto ones are.
				var mine []string
				for i, name := range []string{"code-interpreter", "analysis", "code-interpreter", "b"} {
					c := store.Container{ID: idgen.New("cntr_"), Owner: e.owner, Name: name, Origin: store.OriginAPI,
						CreatedAt: e.clock.now().Unix() - int64(10-i), LastActiveAt: e.clock.now().Unix() - int64(10-i), ExpiresAfterMinutes: 20}
					if err := e.st.PutContainer(ctx, c); err != nil {
						e.t.Fatal(err)
					}
					mine = append(mine, c.ID)
				}
				_, err := e.m.Open(ctx, containers.Spec{Owner: e.owner, Header: e.header})
				var qe *store.QuotaError
				if !errors.As(err, &qe) || qe.Limit != store.LimitOwnerContainers {
					e.t.Fatalf("auto at the quota with only the user's containers: %v, want the owner_containers quota", err)
				}
				for _, id := range mine {
					if _, err := e.st.GetContainer(ctx, e.owner, id); err != nil {
						e.t.Errorf("the user's container %s is gone: %v", id, err)
					}
				}
				// With one auto container among them, that one makes room.
				if err := e.st.DeleteContainer(ctx, e.owner, mine[3]); err != nil {
					e.t.Fatal(err)
				}
				a := e.open("")
				e.ok(a, "print(1)")
				a.Close()
				e.clock.add(time.Second)
				b := e.open("")
				e.ok(b, "print(2)")
				if _, err := e.st.GetContainer(ctx, e.owner, a.ID()); !errors.Is(err, store.ErrNotFound) {
					e.t.Errorf("the older auto container was not recycled (%v)", err)
				}
				for _, id := range mine[:3] {
					if _, err := e.st.GetContainer(ctx, e.owner, id); err != nil {
						e.t.Errorf("the user's container %s is gone: %v", id, err)
					}
				}
			}},

		{name: "write, delete and replace by a directory, kill", run: func(e *hostileEnv) {
			id := e.open("").ID()
			e.respond(id, "open('/mnt/data/x', 'w').write('one')")
			e.respond(id, "import os\nos.remove('/mnt/data/x')\nos.makedirs('/mnt/data/x')\nopen('/mnt/data/x/y', 'w').write('two')")
			if got := e.paths(id); strings.Join(got, ",") != "/mnt/data/x/y" {
				e.t.Errorf("store after the replacement: %q, want only /mnt/data/x/y", got)
			}
			c := e.open(id)
			r := e.run(c, "import os\nos._exit(3)")
			if r.Outcome != sandbox.OutcomeCrashed {
				e.t.Fatalf("os._exit: %s", r.Outcome)
			}
			c.Close()
			for round := 4; round <= 6; round++ {
				rs := e.respond(id, listing+"\nprint(open('/mnt/data/x/y').read())")
				e.wantListing(strings.TrimSuffix(rs[0].Stdout, "two\n"), "/mnt/data/x/y")
				if !strings.HasSuffix(rs[0].Stdout, "two\n") {
					e.t.Errorf("round %d: %q", round, rs[0].Stdout)
				}
			}
			// And back: the directory replaced by a file, with the
			// interpreter killed in between.
			e.respond(id, "import shutil\nshutil.rmtree('/mnt/data/x')\nopen('/mnt/data/x', 'w').write('three')")
			c = e.open(id)
			e.run(c, "import os\nos._exit(3)")
			e.wantListing(e.ok(c, listing).Stdout, "/mnt/data/x")
			if got := e.paths(id); strings.Join(got, ",") != "/mnt/data/x" {
				e.t.Errorf("store: %q, want only /mnt/data/x", got)
			}
		}},

		{name: "an upload replaces what the code left in its way", run: func(e *hostileEnv) {
			id := e.open("").ID()
			c := e.open(id)
			// An empty directory, and (where the guest can make one) a
			// link to a directory outside /mnt/data, at the names the user
			// then uploads; neither is a file, so neither is stored.
			e.ok(c, "import os\nos.makedirs('/mnt/data/report.csv/inner')\nos.makedirs('/tmp/target')\n"+
				"open('/tmp/target/keep', 'w').write('untouched')\ntry:\n    os.symlink('/tmp/target', '/mnt/data/link.csv')\nexcept OSError:\n    pass")
			e.upload(id, "report.csv", []byte("r\n"))
			e.upload(id, "link.csv", []byte("l\n"))
			r := e.ok(c, "import os\nprint(open('/mnt/data/report.csv').read().strip(), open('/mnt/data/link.csv').read().strip(),\n"+
				"      os.path.islink('/mnt/data/link.csv'), sorted(os.listdir('/tmp/target')), open('/tmp/target/keep').read())")
			if strings.TrimSpace(r.Stdout) != "r l False ['keep'] untouched" {
				e.t.Errorf("after the uploads: %q", r.Stdout)
			}
		}},

		{name: "uploads and deletes reach a held interpreter", run: func(e *hostileEnv) {
			id := e.open("").ID()
			first := e.upload(id, "first.csv", []byte("a\n1\n"))
			c := e.open(id)
			e.ok(c, "print(open('/mnt/data/first.csv').read())")
			// Between two calls of one response, and between responses.
			e.upload(id, "second.csv", []byte("b\n2\n"))
			if err := e.st.DeleteFile(context.Background(), e.owner, id, first.ID); err != nil {
				e.t.Fatal(err)
			}
			e.wantListing(e.ok(c, listing).Stdout, "/mnt/data/second.csv")
			c.Close()
			e.upload(id, "second.csv", []byte("b\n3\n")) // replaced: same path and id, new bytes
			e.upload(id, "third.csv", []byte("c\n"))
			rs := e.respond(id, listing+"\nprint(open('/mnt/data/second.csv').read().split()[1])")
			if !strings.HasSuffix(rs[0].Stdout, "/mnt/data/second.csv\n/mnt/data/third.csv\n3\n") || rs[0].Reset {
				e.t.Errorf("the held interpreter after the API's changes (reset=%v):\n%s", rs[0].Reset, rs[0].Stdout)
			}
			// The code deletes a file: the store loses it too.
			e.respond(id, "import os\nos.remove('/mnt/data/third.csv')")
			if got := e.paths(id); strings.Join(got, ",") != "/mnt/data/second.csv" {
				e.t.Errorf("store after the code's delete: %q", got)
			}
			// A variable survived all of it: the interpreter was kept.
			rs = e.respond(id, "try:\n    print(_seen[0])\nexcept NameError:\n    print('lost')")
			if strings.TrimSpace(rs[0].Stdout) == "lost" {
				e.t.Error("the interpreter was replaced instead of updated")
			}
		}},

		{name: "the largest accepted upload is usable", run: func(e *hostileEnv) {
			id := e.open("").ID()
			big := bytes.Repeat([]byte("0123456789abcdef"), int(e.limits.FileBytes/16))
			if _, err := e.st.PutFile(context.Background(), store.File{Owner: e.owner, ContainerID: id, Path: "/mnt/data/over.bin"}, append(big, 'x')); err == nil {
				e.t.Fatalf("the store accepted a file of %d bytes, over what a session holds", len(big)+1)
			}
			e.upload(id, "big.bin", big)
			sum := sha256.Sum256(big)
			rs := e.respond(id, "import hashlib\nprint(hashlib.sha256(open('/mnt/data/big.bin', 'rb').read()).hexdigest())")
			if strings.TrimSpace(rs[0].Stdout) != hex.EncodeToString(sum[:]) {
				e.t.Errorf("the code read %q, want the upload's sha256", rs[0].Stdout)
			}
			// The code fills its /tmp, then a file arrives that the
			// session cannot take beside it where /tmp and /mnt/data share
			// one budget (wasm): a fresh interpreter, with all of the
			// scratch space, takes the container's files and the run.
			// gVisor's /mnt/data is a tmpfs of its own: no replacement.
			other := e.open("")
			e.ok(other, "keep_me = 1\nopen('/tmp/fill', 'wb').write(b'z' * (20 << 20))")
			part := big[:20<<20]
			e.upload(other.ID(), "twenty.bin", part)
			r := e.ok(other, "import os\nprint(os.path.getsize('/mnt/data/twenty.bin'), 'keep_me' in globals())")
			want, reset := fmt.Sprintf("%d True", len(part)), false
			if e.provider == "wasm" {
				want, reset = fmt.Sprintf("%d False", len(part)), true
			}
			if strings.TrimSpace(r.Stdout) != want || r.Reset != reset {
				e.t.Errorf("after /tmp took the room: %q reset=%v, want %q reset=%v", r.Stdout, r.Reset, want, reset)
			}
		}},

		{name: "the longest accepted name attached by file_ids", run: func(e *hostileEnv) {
			ctx := context.Background()
			maxName := store.MaxNameBytes - len(idgen.New("file-")) - 1
			name := strings.Repeat("n", maxName-4) + ".csv"
			f, err := e.st.PutFile(ctx, store.File{Owner: e.owner, Filename: name, Purpose: "user_data"}, []byte("x,y\n"))
			if err != nil {
				e.t.Fatal(err)
			}
			// One longer than the API accepts (another Files API's, or an
			// older server's) is shortened, keeping its extension.
			long := strings.Repeat("é", 120) + ".csv"
			g, err := e.st.PutFile(ctx, store.File{Owner: e.owner, Filename: long, Purpose: "user_data"}, []byte("long\n"))
			if err != nil {
				e.t.Fatal(err)
			}
			c := e.open("", f.ID, g.ID)
			r := e.ok(c, "print(open('/mnt/data/"+f.ID+"-"+name+"').read())\n"+listing)
			if !strings.HasPrefix(r.Stdout, "x,y\n") {
				e.t.Errorf("the code could not read the attached file: %q", r.Stdout)
			}
			files, _ := c.Files(ctx)
			if len(files) != 2 || !strings.Contains(r.Stdout, files[0].Path) || !strings.Contains(r.Stdout, files[1].Path) {
				e.t.Errorf("the model is told %+v; the code sees\n%s", files, r.Stdout)
			}
			for _, fl := range files {
				if base := fl.Path[len("/mnt/data/"):]; len(base) > store.MaxNameBytes {
					e.t.Errorf("%s: a %d-byte name", fl.Path, len(base))
				}
			}
		}},

		{name: "nine thousand files: one note, none re-read", run: func(e *hostileEnv) {
			id := e.open("").ID()
			c := e.open(id)
			r := e.ok(c, "import os\nos.makedirs('/mnt/data/q')\nfor i in range(9000):\n    open('/mnt/data/q/f%04d.txt' % i, 'w').write(str(i))")
			kept := e.paths(id)
			if len(kept) != e.limits.ContainerFiles {
				e.t.Errorf("%d files stored, want the quota's %d", len(kept), e.limits.ContainerFiles)
			}
			if len(r.Changed) != len(kept) {
				e.t.Errorf("the run reports %d files written, the store has %d", len(r.Changed), len(kept))
			}
			want := fmt.Sprintf("%d files in /mnt/data not kept as container files (the container holds at most %d files); first: /mnt/data/q/f%04d.txt", 9000-e.limits.ContainerFiles, e.limits.ContainerFiles, e.limits.ContainerFiles)
			if !strings.Contains(r.Stderr, want) {
				e.t.Errorf("stderr lacks the one summary %q:\n%.1500s", want, r.Stderr)
			}
			// /mnt/data is the container again: what was not kept is gone,
			// so the next runs neither see nor re-read it.
			r = e.ok(c, listing)
			if !strings.HasPrefix(r.Stdout, fmt.Sprintf("%d\n", len(kept))) || strings.Contains(r.Stderr, "not kept") {
				e.t.Errorf("the next run: stdout %.200q, stderr %.300q", r.Stdout, r.Stderr)
			}
			c.Close()
			r = e.respond(id, listing)[0]
			if !strings.HasPrefix(r.Stdout, fmt.Sprintf("%d\n", len(kept))) || strings.Contains(r.Stderr, "not kept") {
				e.t.Errorf("the next response: stdout %.200q, stderr %.300q", r.Stdout, r.Stderr)
			}
		}},

		{name: "a hundred thousand files: listings are truncated, never an error", run: func(e *hostileEnv) {
			id := e.open("").ID()
			e.upload(id, "mine.csv", []byte("keep me\n"))
			c := e.open(id)
			// memfs holds at most 65 536 inodes; a tmpfs more. Either way
			// the code stops where the scratch space does.
			r := e.ok(c, "import os\nos.makedirs('/mnt/data/m')\nn = 0\ntry:\n    for i in range(100000):\n        open('/mnt/data/m/%06d' % i, 'w').close()\n        n += 1\nexcept OSError:\n    pass\nprint(n)")
			written := strings.TrimSpace(r.Stdout)
			if written == "0" || !strings.Contains(r.Stderr, "not kept") {
				e.t.Errorf("wrote %s files; stderr %.500q", written, r.Stderr)
			}
			r = e.ok(c, listing)
			if got := e.paths(id); len(got) != e.limits.ContainerFiles || !slices.Contains(got, "/mnt/data/mine.csv") {
				e.t.Errorf("store: %d files (mine.csv kept: %v), want the quota's %d", len(got), slices.Contains(got, "/mnt/data/mine.csv"), e.limits.ContainerFiles)
			}
			if !strings.HasPrefix(r.Stdout, fmt.Sprintf("%d\n", e.limits.ContainerFiles)) {
				e.t.Errorf("after %s files the code sees %.100q, want the %d kept", written, r.Stdout, e.limits.ContainerFiles)
			}
			c.Close()
			e.ok(e.open(id), "print(open('/mnt/data/mine.csv').read())")
		}},

		{name: "names that reshape text reach the model escaped", run: func(e *hostileEnv) {
			c := e.open("")
			r := e.ok(c, "open('/mnt/data/invoice\\u202etxt.exe', 'w').write('x')\nopen('/mnt/data/a\\u2028b.txt', 'w').write('y')")
			if len(r.Changed) != 2 {
				e.t.Fatalf("changed %+v", r.Changed)
			}
			files, err := c.Files(context.Background())
			if err != nil || len(files) != 2 {
				e.t.Fatalf("files %+v %v", files, err)
			}
			for _, f := range files {
				q := containerapi.QuotePath(f.Path)
				if strings.ContainsAny(q, "\u202e\u2028") || !strings.Contains(q, `\u`) {
					e.t.Errorf("containerapi.QuotePath(%q) = %q: the character reaches the model", f.Path, q)
				}
			}
		}},
	}
}
