package containers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// clock is a settable time for expiry tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	st    *memory.Store
	prov  *pool.Pool
	m     *containers.Manager
	clock *clock
}

func newFixture(t testing.TB, opts ...func(*pool.Config)) *fixture {
	t.Helper()
	clk := &clock{t: time.Now()}
	st := memory.New(store.DefaultLimits(), clk.now)
	t.Cleanup(func() { st.Close() })
	prov := sandboxtest.New(t, opts...)
	// file_ids resolve through the API's own fetcher (files.source: local).
	files := api.StoreFetcher{Store: st, AuthHeaders: authHeaders(), Now: clk.now}
	m := containers.New(containers.Config{Now: clk.now, Files: files}, st, prov, nil)
	t.Cleanup(func() { m.Close() })
	return &fixture{st: st, prov: prov, m: m, clock: clk}
}

// authHeaders names the credential header the fixture's callers send.
func authHeaders() []string { return []string{"authorization"} }

// caller is the owner and headers of a request with key.
func caller(key string) (string, http.Header) {
	h := http.Header{"Authorization": {"Bearer " + key}}
	owner, _ := store.Owner(h, authHeaders())
	return owner, h
}

// fetchFunc adapts a function to containers.FileFetcher.
type fetchFunc func(ctx context.Context, r *http.Request, id string) (string, []byte, error)

func (f fetchFunc) FetchFile(ctx context.Context, r *http.Request, id string) (string, []byte, error) {
	return f(ctx, r, id)
}

func run(t *testing.T, c containers.Container, code string) containers.RunResult {
	t.Helper()
	r, err := c.Run(context.Background(), code)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	if r.Outcome != sandbox.OutcomeCompleted {
		t.Fatalf("run %q: %s %s\n%s", code, r.Outcome, r.Detail, r.Stderr)
	}
	return r
}

func open(t *testing.T, m *containers.Manager, spec containers.Spec) containers.Container {
	t.Helper()
	c, err := m.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("open %+v: %v", spec, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFilesInAndOut: a Files API file and an input file are in /mnt/data
// for the code; what the code writes becomes an assistant container file
// with its exact bytes.
func TestFilesInAndOut(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	owner, hdr := caller("sk-alice")
	up, err := f.st.PutFile(ctx, store.File{ID: "file-abc", Owner: owner, Filename: "data.csv", CreatedAt: f.clock.now().Unix(), Purpose: "user_data"}, []byte("x,y\n1,2\n3,4\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, f.m, containers.Spec{Owner: owner, Header: hdr, FileIDs: []string{up.ID},
		Inputs: []containers.InputFile{{Filename: "notes.txt", Data: []byte("hello\x00world")}}})
	if !strings.HasPrefix(c.ID(), "cntr_") {
		t.Fatalf("container id %q", c.ID())
	}
	files, err := c.Files(ctx)
	if err != nil || len(files) != 2 {
		t.Fatalf("files %+v %v, want the copied file and the input file", files, err)
	}
	r := run(t, c, "import csv\nrows = list(csv.reader(open('/mnt/data/file-abc-data.csv')))\n"+
		"print(len(rows), open('/mnt/data/notes.txt', 'rb').read())\n"+
		"open('/mnt/data/out.csv', 'w').write('sum\\n' + str(sum(int(r[1]) for r in rows[1:])) + '\\n')")
	if !strings.Contains(r.Stdout, `3 b'hello\x00world'`) {
		t.Fatalf("the code did not see the files: %q", r.Stdout)
	}
	if len(r.Changed) != 1 || r.Changed[0].Path != "/mnt/data/out.csv" {
		t.Fatalf("changed %+v, want /mnt/data/out.csv", r.Changed)
	}
	got, err := f.st.GetFile(ctx, owner, c.ID(), r.Changed[0].ID)
	if err != nil || got.Source != "assistant" {
		t.Fatalf("stored %+v %v", got, err)
	}
	data, err := f.st.FileContent(ctx, owner, c.ID(), got.ID)
	if err != nil || string(data) != "sum\n6\n" {
		t.Fatalf("content %q %v", data, err)
	}
	// Unchanged files are not stored again; a changed one keeps its id.
	r = run(t, c, "open('/mnt/data/out.csv', 'a').write('more\\n')")
	if len(r.Changed) != 1 || r.Changed[0].ID != got.ID {
		t.Fatalf("changed %+v, want out.csv under its id %s", r.Changed, got.ID)
	}
}

// TestContainerOutlivesResponse: a second response naming the container
// sees its files and, while this server holds the interpreter, its
// variables; another owner cannot see it at all.
func TestContainerOutlivesResponse(t *testing.T) {
	f := newFixture(t)
	a := open(t, f.m, containers.Spec{Owner: "o_alice"})
	run(t, a, "kept = 41\nopen('/mnt/data/a.txt', 'w').write('A')")
	a.Close()
	b := open(t, f.m, containers.Spec{Owner: "o_alice", ID: a.ID()})
	r := run(t, b, "print(kept + 1, open('/mnt/data/a.txt').read())")
	if strings.TrimSpace(r.Stdout) != "42 A" || r.Reset {
		t.Fatalf("second response: %q reset=%v, want the variables and the file", r.Stdout, r.Reset)
	}
	if _, err := f.m.Open(context.Background(), containers.Spec{Owner: "o_mallory", ID: a.ID()}); !errors.Is(err, containers.ErrNotFound) {
		t.Fatalf("another owner: %v, want ErrContainerNotFound", err)
	}
	// auto with a replayed call of this container reuses it.
	c := open(t, f.m, containers.Spec{Owner: "o_alice", Reuse: []string{"cntr_gone", a.ID()}})
	if c.ID() != a.ID() {
		t.Fatalf("auto with a replayed call made %s, want %s", c.ID(), a.ID())
	}
}

// TestIdleInterpreterEvicted: with one interpreter's capacity, a second
// container takes the idle one's place; the first container's next run
// starts fresh with its files and says its variables were reset.
func TestIdleInterpreterEvicted(t *testing.T) {
	f := newFixture(t, func(c *pool.Config) { c.MaxSessions, c.WarmWorkers, c.QueueWait = 1, 0, 30*time.Second })
	a := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, a, "v = 1\nopen('/mnt/data/keep.txt', 'w').write('kept')")
	a.Close()
	b := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, b, "print('b')")
	b.Close()
	a2 := open(t, f.m, containers.Spec{Owner: "o", ID: a.ID()})
	r := run(t, a2, "print('v' in globals(), open('/mnt/data/keep.txt').read())")
	if strings.TrimSpace(r.Stdout) != "False kept" || !r.Reset {
		t.Fatalf("after eviction: %q reset=%v, want no variables, the file, and reset", r.Stdout, r.Reset)
	}
}

// TestExpiredContainer: a container unused past its expiry is "expired"
// for Open; a lost interpreter is replaced with the files copied back in.
func TestExpiredContainer(t *testing.T) {
	f := newFixture(t)
	a := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, a, "open('/mnt/data/x', 'w').write('x')")
	a.Close()
	f.clock.add(21 * time.Minute)
	if _, err := f.m.Open(context.Background(), containers.Spec{Owner: "o", ID: a.ID()}); !errors.Is(err, containers.ErrExpired) {
		t.Fatalf("expired container: %v, want ErrContainerExpired", err)
	}
	if _, err := f.m.Open(context.Background(), containers.Spec{Owner: "o", FileIDs: []string{"file-nope"}}); !errors.Is(err, containers.ErrFileNotFound) {
		t.Fatalf("unknown file id: %v, want ErrFileNotFound", err)
	}
}

// TestLostInterpreterGetsFiles: after a run kills the interpreter, the next
// run has the container's files again.
func TestLostInterpreterGetsFiles(t *testing.T) {
	f := newFixture(t)
	c := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, c, "open('/mnt/data/keep.txt', 'w').write('still here')")
	if r, err := c.Run(context.Background(), "import os\nos._exit(1)"); err != nil || r.Outcome != sandbox.OutcomeCrashed {
		t.Fatalf("exit: %+v %v", r, err)
	}
	r := run(t, c, "print(open('/mnt/data/keep.txt').read())")
	if strings.TrimSpace(r.Stdout) != "still here" || !r.Reset {
		t.Fatalf("after the interpreter was lost: %q reset=%v", r.Stdout, r.Reset)
	}
}

// TestTwoReplicas: two managers sharing one store (as two servers share
// Redis) run in the same container; the one that does not hold the
// interpreter starts a fresh one with the files.
func TestTwoReplicas(t *testing.T) {
	f := newFixture(t)
	other := containers.New(containers.Config{Now: f.clock.now}, f.st, sandboxtest.New(t), nil)
	t.Cleanup(func() { other.Close() })
	a := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, a, "v = 1\nopen('/mnt/data/shared.txt', 'w').write('from replica 1')")
	b := open(t, other, containers.Spec{Owner: "o", ID: a.ID()})
	r := run(t, b, "print('v' in globals(), open('/mnt/data/shared.txt').read())")
	if strings.TrimSpace(r.Stdout) != "False from replica 1" || !r.Reset {
		t.Fatalf("replica 2: %q reset=%v", r.Stdout, r.Reset)
	}
}

// TestUpstreamFileIDs: with files.source: upstream, file_ids are fetched
// with the caller's own credential (its request headers); a file the
// upstream does not give that credential is not found.
func TestUpstreamFileIDs(t *testing.T) {
	clk := &clock{t: time.Now()}
	st := memory.New(store.DefaultLimits(), clk.now)
	t.Cleanup(func() { st.Close() })
	fetch := fetchFunc(func(_ context.Context, r *http.Request, id string) (string, []byte, error) {
		// The upstream's Files API: one file, for one key.
		if id == "file-up" && r.Header.Get("Authorization") == "Bearer sk-alice" {
			return "report.txt", []byte("from upstream"), nil
		}
		return "", nil, fmt.Errorf("upstream: %w", store.ErrNotFound)
	})
	m := containers.New(containers.Config{Now: clk.now, Files: fetch}, st, sandboxtest.New(t), nil)
	t.Cleanup(func() { m.Close() })
	alice := http.Header{"Authorization": {"Bearer sk-alice"}}
	c := open(t, m, containers.Spec{Owner: "o_alice", Header: alice, FileIDs: []string{"file-up"}})
	r := run(t, c, "print(open('/mnt/data/file-up-report.txt').read())")
	if strings.TrimSpace(r.Stdout) != "from upstream" {
		t.Fatalf("the upstream file is not in the container: %q", r.Stdout)
	}
	mallory := http.Header{"Authorization": {"Bearer sk-mallory"}}
	if _, err := m.Open(context.Background(), containers.Spec{Owner: "o_mallory", Header: mallory, FileIDs: []string{"file-up"}}); !errors.Is(err, containers.ErrFileNotFound) {
		t.Fatalf("another credential: %v, want ErrFileNotFound", err)
	}
}

// quotaFixture is a store whose callers may hold owner containers, and a
// manager over it and a real sandbox.
func quotaFixture(t *testing.T, owner int) (*clock, *memory.Store, *containers.Manager) {
	t.Helper()
	clk := &clock{t: time.Now()}
	l := store.DefaultLimits()
	l.OwnerContainers = owner
	st := memory.New(l, clk.now)
	t.Cleanup(func() { st.Close() })
	m := containers.New(containers.Config{Now: clk.now}, st, sandboxtest.New(t), nil)
	t.Cleanup(func() { m.Close() })
	return clk, st, m
}

// TestAutoContainersRecycled: a caller whose auto containers reach
// owner_containers still gets a container for its next response: the least
// recently used auto container makes room; one made through the API stays.
func TestAutoContainersRecycled(t *testing.T) {
	clk, st, m := quotaFixture(t, 3)
	ctx := context.Background()
	if err := st.PutContainer(ctx, store.Container{ID: "cntr_mine", Owner: "o", Name: "analysis",
		CreatedAt: clk.now().Unix(), LastActiveAt: clk.now().Unix(), ExpiresAfterMinutes: 20}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		clk.add(time.Second)
		c := open(t, m, containers.Spec{Owner: "o"})
		ids = append(ids, c.ID())
		c.Close()
	}
	if _, err := st.GetContainer(ctx, "o", ids[0]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the oldest auto container is still there (%v)", err)
	}
	for _, id := range append([]string{"cntr_mine"}, ids[2:]...) {
		if _, err := st.GetContainer(ctx, "o", id); err != nil {
			t.Errorf("container %s: %v", id, err)
		}
	}
}

// TestAutoContainerInUseNeverRecycled: an auto container a response has
// opened, even before its first run, is never deleted to make room for
// another response of the same caller (the load run lost such containers
// to "store: not found" mid-response).
func TestAutoContainerInUseNeverRecycled(t *testing.T) {
	clk, st, m := quotaFixture(t, 2)
	ctx := context.Background()
	a := open(t, m, containers.Spec{Owner: "o"}) // opened, not yet run
	clk.add(time.Second)
	b := open(t, m, containers.Spec{Owner: "o"})
	clk.add(time.Second)
	if _, err := m.Open(ctx, containers.Spec{Owner: "o"}); err == nil {
		t.Fatal("a third response got a container although both of the caller's are in use")
	}
	for _, c := range []containers.Container{a, b} {
		if _, err := st.GetContainer(ctx, "o", c.ID()); err != nil {
			t.Fatalf("container %s in use was deleted: %v", c.ID(), err)
		}
		if _, err := c.Run(ctx, "print(1)"); err != nil {
			t.Fatalf("run in %s: %v", c.ID(), err)
		}
	}
	a.Close()
	c := open(t, m, containers.Spec{Owner: "o"}) // a is free now: it makes room
	defer c.Close()
	if _, err := st.GetContainer(ctx, "o", a.ID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the released container %s should have made room (%v)", a.ID(), err)
	}
	b.Close()
}

// TestAutoContainersRecycledConcurrently: responses of one caller that
// open auto containers at once, at the owner_containers limit, all get one
// while free ones are there to recycle. Two of them could pick the same
// least recently used container: one deleted it, the other's create then
// hit the limit, and a request of the load run was lost with a 400.
func TestAutoContainersRecycledConcurrently(t *testing.T) {
	const limit, openers, rounds = 8, 6, 20
	clk := &clock{t: time.Now()}
	l := store.DefaultLimits()
	l.OwnerContainers = limit
	st := memory.New(l, clk.now)
	t.Cleanup(func() { st.Close() })
	// A store round trip takes time (Redis is across the network): the
	// window between choosing a container to recycle and creating is real.
	m := containers.New(containers.Config{Now: clk.now}, slowList{st}, sandboxtest.New(t), nil)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	for range limit { // the caller is at its limit, nothing in use
		clk.add(time.Second)
		open(t, m, containers.Spec{Owner: "o"}).Close()
	}
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, openers)
		for range openers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := m.Open(ctx, containers.Spec{Owner: "o"})
				if err != nil {
					errs <- err
					return
				}
				c.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %d responses at once, %d containers allowed, none in use: %v", r, openers, limit, err)
		}
	}
}

// slowList is a store whose listings take a millisecond, like a round trip.
type slowList struct{ *memory.Store }

func (s slowList) ListContainers(ctx context.Context, owner string, o store.ListOptions) ([]store.Container, bool, error) {
	time.Sleep(time.Millisecond)
	return s.Store.ListContainers(ctx, owner, o)
}

// TestReleasedInterpreterServesTheQueue: when every session is taken and
// a new container's first run is queued for one, the interpreter a
// finishing response releases is closed for it, not kept idle for its own
// container while the queued run waits out the queue wait (the load run
// lost most of its code calls that way, as capacity_exhausted).
func TestReleasedInterpreterServesTheQueue(t *testing.T) {
	f := newFixture(t, func(c *pool.Config) {
		c.MaxSessions = 1
		c.WarmWorkers = 0
		c.QueueWait = 5 * time.Second
	})
	a := open(t, f.m, containers.Spec{Owner: "o"})
	run(t, a, "x = 1") // a's response holds the only session
	b := open(t, f.m, containers.Spec{Owner: "o"})
	done := make(chan error, 1)
	go func() {
		r, err := b.Run(context.Background(), "print(2)")
		if err == nil && r.Outcome != sandbox.OutcomeCompleted {
			err = fmt.Errorf("%s: %s", r.Outcome, r.Detail)
		}
		done <- err
	}()
	for f.prov.Capacity().Waiting == 0 { // b's run is queued
		select {
		case err := <-done:
			t.Fatalf("b ran while a held the only session: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	a.Close() // a's response ends
	if err := <-done; err != nil {
		t.Fatalf("the queued run did not get the released session: %v", err)
	}
	// a's container lives on; its next response starts a fresh interpreter
	// with the files but not the variables, as after an eviction.
	b.Close()
	a2 := open(t, f.m, containers.Spec{Owner: "o", ID: a.ID()})
	if r := run(t, a2, "print('x' in globals())"); r.Stdout != "False\n" {
		t.Fatalf("a's next response: %q", r.Stdout)
	}
}

// TestExplicitCreateRecyclesAuto: a caller whose responses' auto containers
// fill owner_containers can still make one through POST /v1/containers
// (the official client over real HTTP): the least recently used idle auto
// container makes room, as for a response. One a response has open, and
// one made through the API, never do; with only those left the create is
// OpenAI's 400.
func TestExplicitCreateRecyclesAuto(t *testing.T) {
	clk, st, m := quotaFixture(t, 3)
	srv, err := api.New(api.Config{Create: m.Create, AuthHeaders: authHeaders(), Now: clk.now}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("sk-busy"), option.WithMaxRetries(0))
	owner, _ := caller("sk-busy")
	ctx := context.Background()

	var autos []string
	for range 2 {
		clk.add(time.Second)
		c := open(t, m, containers.Spec{Owner: owner})
		autos = append(autos, c.ID())
		c.Close()
	}
	clk.add(time.Second)
	inUse := open(t, m, containers.Spec{Owner: owner}) // a response has it open
	mine, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "explicit"})
	if err != nil {
		t.Fatalf("create at the quota with idle auto containers: %v", err)
	}
	if _, err := st.GetContainer(ctx, owner, autos[0]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the least recently used auto container was not recycled (%v)", err)
	}
	if _, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "second"}); err != nil {
		t.Fatalf("second create: %v", err)
	}
	// Left: the open auto container and the two made through the API.
	_, err = client.Containers.New(ctx, openai.ContainerNewParams{Name: "third"})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, "owner_containers") {
		t.Fatalf("create with only an open auto container and the API's: %v, want OpenAI's 400 quota error", err)
	}
	for _, id := range []string{inUse.ID(), mine.ID} {
		if _, err := st.GetContainer(ctx, owner, id); err != nil {
			t.Errorf("container %s is gone: %v", id, err)
		}
	}
}
