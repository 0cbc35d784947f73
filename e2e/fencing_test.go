package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// fencingCluster is `extproc dev` replicas on one Redis and one checkpoint
// directory, as a user runs them, with a model that runs exactly the code
// it is asked (the user's text) and answers with the tool's output.
type fencingCluster struct {
	t     *testing.T
	bin   string
	env   []string
	model *model
	redis *redistest.Server
}

func newFencingCluster(t *testing.T, after, leaseTTL time.Duration) *fencingCluster {
	sh := loadShapes(t)
	fc := &fencingCluster{t: t, bin: buildExtproc(t), redis: redistest.StartServer(t, "--maxmemory-policy", "noeviction")}
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(c.userText())}}
		}
		return reply{items: []string{m.message(lastOutputs(c)[0].Get("output").Str)}}
	})
	fc.model = m
	// As a new user runs replicas on one host: no key and no cluster
	// secret configured — the checkpoint key is the file the first replica
	// makes in the shared directory, and the cluster key is derived from
	// it (never kept in Redis).
	fc.env = []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + fc.redis.URL,
		"CODEINTERP_CHECKPOINTS_DIR=" + t.TempDir(),
		"CODEINTERP_CHECKPOINTS_AFTER=" + after.String(), "CODEINTERP_CLUSTER_LEASE_TTL=" + leaseTTL.String()}
	return fc
}

// start starts a replica and returns it with a client (no retries: every
// error is seen).
func (fc *fencingCluster) start() (*proc, openai.Client) {
	p := startProc(fc.t, fc.bin, fc.env, "dev", "--listen", "127.0.0.1:0", "--upstream", fc.model.URL(),
		"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
	fc.t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT); _ = p.cmd.Process.Kill() })
	return p, openai.NewClient(option.WithBaseURL(p.baseURL(fc.t)+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
}

// turn runs code in the container through c: the tool's output (as the
// model echoes it), or the request's error.
func turn(ctx context.Context, c openai.Client, cid, code string) (string, error) {
	p := ciParams(code, true)
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(cid)}
	r, err := c.Responses.New(ctx, p)
	if err != nil {
		return "", err
	}
	return r.OutputText(), nil
}

func mustTurn(t *testing.T, c openai.Client, cid, code string) string {
	t.Helper()
	out, err := turn(context.Background(), c, cid, code)
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return out
}

var bumpRE = regexp.MustCompile(`bump (\d+)`)

// bumps are the values the bump turns reported, sorted.
func bumps(t *testing.T, outs ...string) []int {
	t.Helper()
	var vs []int
	for _, o := range outs {
		m := bumpRE.FindStringSubmatch(o)
		if m == nil {
			t.Fatalf("a bump answered %q", o)
		}
		v, _ := strconv.Atoi(m[1])
		vs = append(vs, v)
	}
	sort.Ints(vs)
	return vs
}

// unavailable reports whether err is the retryable refusal a run gets
// when the container cannot run now: a 503 in OpenAI's error shape.
func unavailable(err error) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == 503 && apiErr.Code == "container_unavailable" && apiErr.Type == "server_error"
}

const bumpCode = "x += 1\nprint('bump', x)"

// TestPausedHolder is issue 37's row 2 with two replicas: a holder paused
// (SIGSTOP) for less than its lease keeps the container — a run sent to
// the other replica meanwhile waits for it and runs there after, both
// bumps counted once; one paused for longer is fenced: the other replica
// takes the container from its checkpoint, and the run the paused holder
// was in the middle of fails with a retryable 503 instead of reporting a
// bump that no interpreter keeps.
func TestPausedHolder(t *testing.T) {
	const ttl = 3 * time.Second
	fc := newFencingCluster(t, 100*time.Millisecond, ttl)
	pa, a := fc.start()
	_, b := fc.start()
	ctx := context.Background()
	ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "paused"})
	if err != nil {
		t.Fatal(err)
	}
	mustTurn(t, a, ctr.ID, "x = 0")

	pause := func(d time.Duration) {
		if err := pa.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		if err := pa.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}

	// Less than the lease: A keeps the container; B's run waits for it.
	slow := make(chan string, 1)
	go func() {
		out, err := turn(ctx, a, ctr.ID, "import time\ntime.sleep(1.5)\n"+bumpCode)
		if err != nil {
			out = "error: " + err.Error()
		}
		slow <- out
	}()
	time.Sleep(500 * time.Millisecond)
	other := make(chan string, 1)
	go func() {
		out, err := turn(ctx, b, ctr.ID, bumpCode)
		if err != nil {
			out = "error: " + err.Error()
		}
		other <- out
	}()
	pause(ttl / 3)
	if got := bumps(t, <-slow, <-other); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("two bumps around a pause shorter than the lease: %v, want [1 2]", got)
	}

	// Longer than the lease: A is fenced.
	waitFor(t, "the idle checkpoint of x = 2", func() bool { return strings.Contains(mustTurn(t, b, ctr.ID, "print('x is', x)"), "x is 2") })
	time.Sleep(300 * time.Millisecond) // past checkpoints.after: x = 2 is checkpointed
	fenced := make(chan error, 1)
	go func() {
		out, err := turn(ctx, a, ctr.ID, "import time\nx += 1000\ntime.sleep(1.5)\nprint('bump', x)")
		if err == nil {
			err = fmt.Errorf("reported done: %q", out)
		}
		fenced <- err
	}()
	time.Sleep(500 * time.Millisecond)
	go func() { pause(2 * ttl) }()
	time.Sleep(100 * time.Millisecond)
	out, err := turn(ctx, b, ctr.ID, bumpCode)
	if err != nil {
		t.Fatalf("a bump on B while A is paused past its lease: %v", err)
	}
	if got := bumps(t, out); got[0] != 3 {
		t.Fatalf("B's bump while A is paused past its lease: %q, want bump 3 (x = 2 from the checkpoint)", out)
	}
	if err := <-fenced; !unavailable(err) {
		t.Fatalf("the run A was in when it was paused past its lease: %v, want a 503 container_unavailable", err)
	}
	for name, c := range map[string]openai.Client{"A": a, "B": b} {
		if out := mustTurn(t, c, ctr.ID, "print('x is', x)"); !strings.Contains(out, "x is 3") {
			t.Fatalf("x through %s after the fenced run: %q, want 3", name, out)
		}
	}
}

// TestRedisRefusingWrites is row 1: Redis at maxmemory under noeviction
// (as deploy/ ships it) refuses writes. Container leases still work (their
// scripts may exceed maxmemory), so bumps through both replicas run in one
// interpreter, each once — with the holder alive, and after it was killed
// and its lease expired. With Redis unreachable, runs are refused with a
// retryable 503 and nothing runs.
func TestRedisRefusingWrites(t *testing.T) {
	const ttl = 2 * time.Second
	fc := newFencingCluster(t, 100*time.Millisecond, ttl)
	pa, a := fc.start()
	_, b := fc.start()
	ctx := context.Background()
	ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "full"})
	if err != nil {
		t.Fatal(err)
	}
	mustTurn(t, a, ctr.ID, "x = 0")

	fourBumps := func(clients ...openai.Client) []string {
		var wg sync.WaitGroup
		outs := make([]string, 4)
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := turn(ctx, clients[i%len(clients)], ctr.ID, bumpCode)
				if err != nil {
					out = "error: " + err.Error()
				}
				outs[i] = out
			}()
		}
		wg.Wait()
		return outs
	}
	full := fc.redis.RefuseWrites
	full(t, true)
	if got := bumps(t, fourBumps(a, b)...); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("four bumps through both replicas on a full Redis, holder alive: %v, want [1 2 3 4]", got)
	}
	full(t, false)

	// The holder killed; a new replica started in its place; its lease
	// expires; then Redis refuses writes again.
	waitFor(t, "the idle checkpoint of x = 4", func() bool { return strings.Contains(mustTurn(t, a, ctr.ID, "print('x is', x)"), "x is 4") })
	time.Sleep(300 * time.Millisecond)
	if err := pa.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-pa.done
	time.Sleep(ttl + 500*time.Millisecond)
	full(t, true)
	_, c := fc.start() // a replica started while Redis refuses writes
	if got := bumps(t, fourBumps(b, c)...); fmt.Sprint(got) != "[5 6 7 8]" {
		t.Fatalf("four bumps through two replicas on a full Redis after the holder died: %v, want [5 6 7 8]", got)
	}
	full(t, false)

	// Redis down: nothing runs, and the client is told to retry.
	fc.redis.Stop(t)
	if _, err := turn(ctx, b, ctr.ID, bumpCode); !unavailable(err) {
		t.Fatalf("a bump with Redis down: %v, want a 503 container_unavailable", err)
	}
}

// TestKillFreshHolder is row 7: kill -9 of a replica started seconds
// before, 3 s after its first response, with the default
// checkpoints.after (2 s): the state was promised durable within
// after + 1 s, and the next turn on the other replica has it.
func TestKillFreshHolder(t *testing.T) {
	fc := newFencingCluster(t, 2*time.Second, 3*time.Second)
	_, b := fc.start()
	pa, a := fc.start()
	ctx := context.Background()
	ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	mustTurn(t, a, ctr.ID, "kept = 'survives'")
	time.Sleep(3 * time.Second)
	if err := pa.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-pa.done
	out := mustTurn(t, b, ctr.ID, "print(kept)")
	if !strings.Contains(out, "survives") {
		t.Fatalf("after kill -9 of a fresh holder 3 s after its response: %q, want the state", out)
	}
}
