package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// TestChaos is issue 37's chaos test: three `extproc dev` replicas on one
// Redis and one checkpoint store, a dozen containers, a dozen clients
// bumping and reading them through random live replicas, while a fault
// goroutine pauses replicas (shorter and longer than the lease), kills
// them (-9) and restarts them, SIGTERMs and restarts them, and makes
// Redis refuse writes. Every call is recorded (its start, end and
// answer); each container's history is checked for linearizability with
// Porcupine (chaos_history_test.go has the model and what the server
// may legitimately lose), and at the end every replica must read every
// container the same, with every acknowledged bump in it exactly once.
//
// CODEINTERP_CHAOS_SEED reruns a schedule (the faults, their targets and
// lengths, each client's choices; the timing is the machine's);
// CODEINTERP_CHAOS_DURATION sets how long faults are made (default 90s);
// CODEINTERP_CHAOS_FAULTS limits their kinds (e.g. "kill,term", or
// "none").
// On failure the history (JSON), its visualization (HTML) and every
// replica's log are kept in a directory the test names.
func TestChaos(t *testing.T) {
	seed, dur, kinds := chaosSettings(t)
	t.Logf("chaos: seed %d (rerun with CODEINTERP_CHAOS_SEED=%d), %s of faults (CODEINTERP_CHAOS_DURATION) of the kinds %v (CODEINTERP_CHAOS_FAULTS)",
		seed, seed, dur, kinds)
	// What the test needs, said up front: root and the runtime (the
	// sandbox), redis-server (redistest fails without it).
	sandboxtest.Config(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("chaos: redis-server is not installed (apt-get install redis-server, or make setup): %v", err)
	}

	arts, err := os.MkdirTemp("", fmt.Sprintf("codeinterp-chaos-%d-", seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: the history, its visualization and the replicas' logs are kept in %s", arts)
			return
		}
		os.RemoveAll(arts)
	})

	sh := loadShapes(t)
	bin := buildExtproc(t)
	rs := redistest.StartServer(t)
	ropt, err := goredis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(ropt)
	t.Cleanup(func() { _ = rdb.Close() })

	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(c.userText())}} // the prompt is the code
		}
		// The model answers with exactly what the tool told it.
		return reply{items: []string{m.message(lastOutputs(c)[0].Get("output").Str)}}
	})
	m.live = true // streamed calls stream from the model too

	ckdir := t.TempDir()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cl := &chaosCluster{t: t, bin: bin, arts: arts, t0: time.Now(),
		env: []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + rs.URL,
			"CODEINTERP_CHECKPOINTS_DIR=" + ckdir, "CODEINTERP_CHECKPOINTS_KEY=" + base64.StdEncoding.EncodeToString(key),
			"CODEINTERP_CHECKPOINTS_AFTER=" + chaosAfter.String(), "CODEINTERP_CLUSTER_LEASE_TTL=" + chaosLeaseTTL.String(),
			// Room for every container on one replica: evictions are not
			// what this test is about.
			"CODEINTERP_SANDBOX_MAX_SESSIONS=" + strconv.Itoa(chaosContainers)},
		args: []string{"dev", "--listen", "127.0.0.1:0", "--upstream", m.URL(),
			"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml")},
	}
	t.Cleanup(cl.close)
	var wg sync.WaitGroup
	for slot := range chaosReplicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cl.start(slot); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("chaos: %d replicas up after %s", chaosReplicas, time.Since(cl.t0).Round(time.Millisecond))

	ctx := context.Background()
	var containers []string
	for i := range chaosContainers {
		r := cl.replica(i % chaosReplicas)
		cctx, cancel := context.WithTimeout(ctx, chaosRequestTimeout)
		ctr, err := r.client.Containers.New(cctx, openai.ContainerNewParams{Name: fmt.Sprintf("chaos-%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("chaos: creating container %d on %s: %v", i, r.name, err)
		}
		containers = append(containers, ctr.ID)
	}

	watchStop := make(chan struct{})
	saved := cl.watchCheckpoints(ckdir, containers, watchStop)
	h := &chaosHistory{}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range chaosClients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			chaosClient(c, seed, cl, containers, h, stop)
		}()
	}
	faultsStart := time.Now()
	faults := chaosFaults(t, seed, dur, kinds, cl, rdb)
	// A little calm with clients still running, then stop them; calls
	// in flight end within their timeout.
	time.Sleep(2 * time.Second)
	close(stop)
	clients.Wait()
	t.Logf("chaos: %d faults in %s; %d calls by %d clients", len(faults), time.Since(faultsStart).Round(time.Millisecond), len(h.all()), chaosClients)

	// Every replica is up (a failed restart was an error already); the
	// leases of the killed ones expire; then each container is read
	// through every replica.
	time.Sleep(chaosLeaseTTL + time.Second)
	views := map[string]map[string][]string{}
	var unreadable []string
	for _, ctr := range containers {
		views[ctr] = map[string][]string{}
		for slot := range chaosReplicas {
			r := cl.replica(slot)
			if r == nil {
				unreadable = append(unreadable, fmt.Sprintf("%s: replica %d is down", ctr, slot))
				continue
			}
			var op chaosOp
			for attempt := range 5 {
				if attempt > 0 {
					time.Sleep(time.Second)
				}
				op = chaosCall(cl, r, chaosClients+slot, ctr, chaosRead, "", 0, false)
				h.add(op)
				if op.Outcome == chaosOK {
					break
				}
			}
			if op.Outcome != chaosOK {
				unreadable = append(unreadable, fmt.Sprintf("%s: could not be read through %s: %s", ctr, r.name, op.Detail))
				continue
			}
			views[ctr][r.name] = op.List
		}
	}

	ops := h.all()
	close(watchStop)
	w := chaosWindows{Durable: chaosAfter + time.Second + chaosDurableSlack, Grace: chaosGrace, Saved: <-saved}
	writes := 0
	for _, ws := range w.Saved {
		writes += len(ws)
	}
	t.Logf("chaos: %s; %d checkpoint writes seen in the store", chaosSummary(ops, faults, w), writes)
	chaosSave(t, arts, seed, ops, faults)

	// Linearizability, per container.
	verdicts, mv := chaosCheck(ops, faults, w, chaosLimits{PerContainer: 30 * time.Second, Total: chaosCheckTimeout, MaxHeap: 2 << 30})
	var ann []porcupine.Annotation
	for _, f := range faults {
		ann = append(ann, porcupine.Annotation{Tag: "faults", Start: int64(f.Start), End: int64(f.End),
			Description: f.Kind + " " + strconv.Itoa(f.Replica), Details: f.String(), BackgroundColor: "#ffd6d6"})
	}
	for _, v := range verdicts {
		if v.Result == porcupine.Ok {
			continue
		}
		path := filepath.Join(arts, "history-"+v.Container+".html")
		v.Info.AddAnnotations(ann)
		if err := porcupine.VisualizePath(mv, v.Info, path); err != nil {
			path = "(visualization failed: " + err.Error() + ")"
		}
		what := "is not linearizable"
		if v.Result == porcupine.Unknown {
			what = "could not be checked (inconclusive)"
		}
		t.Errorf("chaos (seed %d): the history of %s %s: %s\nvisualization: %s", seed, v.Container, what, v, path)
		if v.StuckAt > 0 {
			t.Logf("chaos: %s around the call no linearization places:\n%s", v.Container, chaosExplain(ops, faults, v.Container, v.StuckAt))
			t.Logf("chaos: what the replicas logged of %s:\n%s", v.Container, chaosReplicaLines(arts, v.Container, 60))
		}
	}
	for _, u := range unreadable {
		t.Errorf("chaos (seed %d): at the end, %s", seed, u)
	}
	for _, ctr := range containers {
		problems := chaosFinalCheck(ctr, ops, faults, w, views[ctr])
		for i, p := range problems {
			if i == 10 {
				t.Errorf("chaos (seed %d): at the end, %s: %d more problems (history.json has every call)", seed, ctr, len(problems)-i)
				break
			}
			t.Errorf("chaos (seed %d): at the end, %s", seed, p)
		}
	}
}

const (
	chaosReplicas   = 3
	chaosContainers = 12
	chaosClients    = 12
	chaosLeaseTTL   = 3 * time.Second
	chaosAfter      = 200 * time.Millisecond
	// chaosDurableSlack is the checker's tolerance, beyond the server's
	// promise (checkpoints.after + 1 s), for a checkpoint to reach the
	// store on a loaded two-core machine (make test runs other packages
	// beside it). TestKillFreshHolder holds the promise itself.
	chaosDurableSlack = time.Second
	// chaosGrace: an answer sent just before a kill may reach the client
	// just after it.
	chaosGrace = 500 * time.Millisecond
	// chaosRequestTimeout bounds each call (longer than the longest
	// pause, so a call a paused replica holds may still end).
	chaosRequestTimeout  = 20 * time.Second
	chaosMaxOpsPerClient = 3000
	chaosMaxFaults       = 200
	chaosCheckTimeout    = 90 * time.Second
)

// chaosFaultKinds are the faults TestChaos makes.
var chaosFaultKinds = []string{"pause-short", "pause-long", "kill", "term", "redis-full"}

// chaosSettings reads CODEINTERP_CHAOS_SEED, CODEINTERP_CHAOS_DURATION
// and CODEINTERP_CHAOS_FAULTS (the kinds of fault to make, comma
// separated; "none" for a run without faults; default all).
func chaosSettings(t *testing.T) (int64, time.Duration, []string) {
	seed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("CODEINTERP_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CODEINTERP_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	dur := 90 * time.Second
	if s := os.Getenv("CODEINTERP_CHAOS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 || v > 30*time.Minute {
			t.Fatalf("CODEINTERP_CHAOS_DURATION=%q: want a duration up to 30m (%v)", s, err)
		}
		dur = v
	}
	kinds := chaosFaultKinds
	if s := os.Getenv("CODEINTERP_CHAOS_FAULTS"); s != "" {
		kinds = nil
		for _, k := range strings.Split(s, ",") {
			switch k = strings.TrimSpace(k); {
			case k == "none":
			case slices.Contains(chaosFaultKinds, k):
				if !slices.Contains(kinds, k) {
					kinds = append(kinds, k)
				}
			default:
				t.Fatalf("CODEINTERP_CHAOS_FAULTS=%q: %q is none of none, %s", s, k, strings.Join(chaosFaultKinds, ", "))
			}
		}
	}
	return seed, dur, kinds
}

// chaosHistory is every call recorded.
type chaosHistory struct {
	mu  sync.Mutex
	ops []chaosOp
}

func (h *chaosHistory) add(op chaosOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *chaosHistory) all() []chaosOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]chaosOp(nil), h.ops...)
}

// chaosClient sends calls until stop: a random container, a bump (7 in
// 10; 4 in 10 of them slow, sleeping 0.1–0.5 s first) or a read,
// streamed 1 in 4, through a random live replica, with a pause of
// 0.1–0.4 s after each.
func chaosClient(c int, seed int64, cl *chaosCluster, containers []string, h *chaosHistory, stop <-chan struct{}) {
	rng := mrand.New(mrand.NewPCG(uint64(seed), uint64(c)+1))
	for seq := 0; seq < chaosMaxOpsPerClient; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		ctr := containers[rng.IntN(len(containers))]
		kind, id := chaosRead, ""
		if rng.IntN(10) < 7 {
			kind, id = chaosBump, fmt.Sprintf("op-%d-%d", c, seq)
		}
		var sleep time.Duration
		if rng.IntN(10) < 4 {
			sleep = time.Duration(100+rng.IntN(400)) * time.Millisecond
		}
		stream := rng.IntN(4) == 0
		think := time.Duration(100+rng.IntN(300)) * time.Millisecond
		r := cl.pick(rng)
		if r == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		h.add(chaosCall(cl, r, c, ctr, kind, id, sleep, stream))
		time.Sleep(think)
	}
}

// chaosCall makes one call and records it.
func chaosCall(cl *chaosCluster, r *chaosReplica, client int, ctr string, kind chaosKind, id string, sleep time.Duration, stream bool) chaosOp {
	code := chaosReadCode
	if kind == chaosBump {
		code = chaosBumpCode(id, sleep)
	}
	op := chaosOp{Client: client, Container: ctr, Kind: kind, ID: id, Replica: r.name, Stream: stream}
	ctx, cancel := context.WithTimeout(context.Background(), chaosRequestTimeout)
	defer cancel()
	p := ciParams(code, false)
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr)}
	op.Start = cl.since()
	var resp *responses.Response
	var evs []responses.ResponseStreamEventUnion
	var err error
	if stream {
		resp, evs, err = readStream(r.client.Responses.NewStreaming(ctx, p), nil)
	} else {
		resp, err = r.client.Responses.New(ctx, p)
	}
	op.End = cl.since()
	if err != nil {
		op.Outcome, op.Detail = chaosClassifyError(err, evs)
		return op
	}
	chaosParseOutput(&op, resp.OutputText())
	return op
}

// chaosReplica is one `extproc dev` process.
type chaosReplica struct {
	slot   int
	name   string // r<slot>#<incarnation>
	cmd    *exec.Cmd
	client openai.Client
	done   chan struct{} // closed when it exited
	err    error         // its exit, once done
}

// chaosCluster is the replicas: a slot each, nil while down.
type chaosCluster struct {
	t    *testing.T
	bin  string
	env  []string
	args []string
	arts string
	t0   time.Time

	mu    sync.Mutex
	slots [chaosReplicas]*chaosReplica
	gen   [chaosReplicas]int
	procs []*chaosReplica // every process started
}

func (cl *chaosCluster) since() time.Duration { return time.Since(cl.t0) }

// start starts a new process in slot (on a new port) and waits for it
// to be ready.
func (cl *chaosCluster) start(slot int) (*chaosReplica, error) {
	cl.mu.Lock()
	name := fmt.Sprintf("r%d#%d", slot, cl.gen[slot])
	cl.gen[slot]++
	cl.mu.Unlock()
	logf, err := os.Create(filepath.Join(cl.arts, "replica-"+strings.ReplaceAll(name, "#", "-")+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cl.bin, cl.args...)
	cmd.Env = append(os.Environ(), cl.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("chaos: starting %s: %w", name, err)
	}
	r := &chaosReplica{slot: slot, name: name, cmd: cmd, done: make(chan struct{})}
	cl.mu.Lock()
	cl.procs = append(cl.procs, r)
	cl.mu.Unlock()
	ready := make(chan string, 1)
	var last []string // the last lines, until it is ready
	go func() {
		const prefix = "extproc dev: OPENAI_BASE_URL="
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		started := false
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(logf, l)
			if strings.HasPrefix(l, prefix) {
				started = true
				ready <- strings.Fields(strings.TrimPrefix(l, prefix))[0]
			}
			if !started {
				last = append(last[max(0, len(last)-4):], l)
			}
		}
		r.err = cmd.Wait()
		fmt.Fprintf(logf, "chaos: %s exited: %v\n", name, r.err)
		logf.Close()
		close(r.done)
	}()
	select {
	case base := <-ready:
		r.client = openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	case <-r.done:
		return nil, fmt.Errorf("chaos: %s exited (%v) before it was ready; its log (%s) ends:\n%s", name, r.err, logf.Name(), strings.Join(last, "\n"))
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("chaos: %s was not ready after 2 minutes; its log: %s", name, logf.Name())
	}
	cl.mu.Lock()
	cl.slots[slot] = r
	cl.mu.Unlock()
	return r, nil
}

// replica is the process in slot (nil while down).
func (cl *chaosCluster) replica(slot int) *chaosReplica {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.slots[slot]
}

// pick is a random replica that is up (paused ones too: a balancer does
// not know).
func (cl *chaosCluster) pick(rng *mrand.Rand) *chaosReplica {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var up []*chaosReplica
	for _, r := range cl.slots {
		if r != nil {
			up = append(up, r)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rng.IntN(len(up))]
}

// down takes slot's process out of the clients' choice and returns it.
func (cl *chaosCluster) down(slot int) *chaosReplica {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	r := cl.slots[slot]
	cl.slots[slot] = nil
	return r
}

// close kills every process still running (resumed first).
func (cl *chaosCluster) close() {
	cl.mu.Lock()
	procs := append([]*chaosReplica(nil), cl.procs...)
	cl.mu.Unlock()
	for _, r := range procs {
		select {
		case <-r.done:
			continue
		default:
		}
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// chaosFaults makes faults of the kinds given until dur has passed and
// returns them. The schedule (each fault's kind, target, length, and the
// gap before it) comes from seed; each kind comes once in the first
// round. Without kinds it only waits.
func chaosFaults(t *testing.T, seed int64, dur time.Duration, kinds []string, cl *chaosCluster, rdb *goredis.Client) []chaosFault {
	deadline := time.Now().Add(dur)
	if len(kinds) == 0 {
		time.Sleep(dur)
		return nil
	}
	// How often each kind comes after the first round.
	weight := map[string]int{"pause-short": 3, "pause-long": 2, "kill": 2, "term": 1, "redis-full": 2}
	var pool []string
	for _, k := range kinds {
		for range weight[k] {
			pool = append(pool, k)
		}
	}
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0))
	first := rng.Perm(len(kinds))
	var faults []chaosFault
	for i := 0; i < chaosMaxFaults && time.Now().Before(deadline); i++ {
		// Every draw is made whatever the kind, so the schedule does not
		// depend on the machine.
		kindDraw, slot, frac := rng.IntN(len(pool)), rng.IntN(chaosReplicas), rng.Float64()
		gap := 1500*time.Millisecond + time.Duration(rng.Float64()*float64(2500*time.Millisecond))
		kind := pool[kindDraw]
		if i < len(kinds) {
			kind = kinds[first[i]]
		}
		time.Sleep(gap)
		var f chaosFault
		switch kind {
		case "pause-short":
			// Well inside the lease: renewals come every TTL/3.
			f = cl.pause(slot, 300*time.Millisecond+time.Duration(frac*float64(900*time.Millisecond)), false)
		case "pause-long":
			f = cl.pause(slot, chaosLeaseTTL+1500*time.Millisecond+time.Duration(frac*float64(2*time.Second)), true)
		case "kill":
			f = cl.restart(slot, syscall.SIGKILL)
		case "term":
			f = cl.restart(slot, syscall.SIGTERM)
		case "redis-full":
			f = chaosRedisFull(cl, rdb, 2*time.Second+time.Duration(frac*float64(2*time.Second)))
		}
		t.Logf("chaos: fault %d: %s", i, f)
		faults = append(faults, f)
		if strings.HasPrefix(f.Detail, "FAILED") {
			t.Errorf("chaos: fault %d: %s", i, f)
			break
		}
	}
	return faults
}

// pause SIGSTOPs slot's process for d, then SIGCONTs it.
func (cl *chaosCluster) pause(slot int, d time.Duration, long bool) chaosFault {
	f := chaosFault{Kind: "pause-short", Replica: slot, Loses: long}
	if long {
		f.Kind = "pause-long"
	}
	r := cl.replica(slot)
	if r == nil {
		f.Start, f.End, f.Detail = cl.since(), cl.since(), "FAILED: the replica is down"
		return f
	}
	f.Start = cl.since()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		f.End, f.Detail = cl.since(), "FAILED: SIGSTOP: "+err.Error()
		return f
	}
	time.Sleep(d)
	err := r.cmd.Process.Signal(syscall.SIGCONT)
	f.End = cl.since()
	f.Detail = r.name
	if err != nil {
		f.Detail = "FAILED: SIGCONT: " + err.Error()
	}
	return f
}

// restart signals slot's process (SIGKILL or SIGTERM), waits for it to
// exit and starts a new one in its place.
func (cl *chaosCluster) restart(slot int, sig syscall.Signal) chaosFault {
	f := chaosFault{Kind: "kill", Replica: slot, Loses: sig == syscall.SIGKILL}
	if sig == syscall.SIGTERM {
		f.Kind = "term"
	}
	f.Start = cl.since()
	r := cl.down(slot)
	if r == nil {
		f.End, f.Detail = cl.since(), "FAILED: the replica is down"
		return f
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		f.End, f.Detail = cl.since(), "FAILED: "+sig.String()+": "+err.Error()
		return f
	}
	select {
	case <-r.done:
	case <-time.After(90 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		f.End, f.Detail = cl.since(), "FAILED: "+r.name+" did not exit within 90s of "+sig.String()
		return f
	}
	exited := cl.since()
	if sig == syscall.SIGTERM && r.err != nil {
		f.Detail = fmt.Sprintf("FAILED: %s exited with %v after SIGTERM", r.name, r.err)
	}
	n, err := cl.start(slot)
	f.End = cl.since()
	if err != nil {
		f.Detail = "FAILED: restart: " + err.Error()
		return f
	}
	if f.Detail == "" {
		f.Detail = fmt.Sprintf("%s exited after %.2fs; %s ready", r.name, (exited - f.Start).Seconds(), n.name)
	}
	return f
}

var chaosUsedMemory = regexp.MustCompile(`(?m)^used_memory:(\d+)\r?$`)

// chaosRedisFull makes Redis refuse writes for d: maxmemory at the memory
// in use (lowered as it drops) under noeviction, then no limit again.
func chaosRedisFull(cl *chaosCluster, rdb *goredis.Client, d time.Duration) chaosFault {
	f := chaosFault{Kind: "redis-full", Replica: -1}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	used := func() (int64, error) {
		s, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			return 0, err
		}
		mm := chaosUsedMemory.FindStringSubmatch(s)
		if mm == nil {
			return 0, errors.New("no used_memory in INFO memory")
		}
		return strconv.ParseInt(mm[1], 10, 64)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		f.Start, f.End, f.Detail = cl.since(), cl.since(), "FAILED: "+err.Error()
		return f
	}
	u, err := used()
	if err != nil {
		f.Start, f.End, f.Detail = cl.since(), cl.since(), "FAILED: "+err.Error()
		return f
	}
	// Well below what is in use: memory freed meanwhile (keys expiring,
	// a client's buffers) must not bring it back under the limit.
	limit := u / 2
	f.Start = cl.since()
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		f.End, f.Detail = cl.since(), "FAILED: "+err.Error()
		return f
	}
	// Redis refuses a write once the memory in use is above the limit:
	// the probe's is, or the one after it.
	refused := false
	for range 3 {
		if err := rdb.Set(ctx, "chaos:probe", strings.Repeat("x", 1024), time.Minute).Err(); err != nil && strings.Contains(err.Error(), "OOM") {
			refused = true
			break
		}
	}
	for until := time.Now().Add(d); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		if u, err := used(); err == nil && u < limit {
			limit = u
			_ = rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err()
		}
	}
	err = rdb.ConfigSet(ctx, "maxmemory", "0").Err()
	f.End = cl.since()
	f.Detail = fmt.Sprintf("maxmemory %d B, writes refused: %v", limit, refused)
	if err != nil {
		f.Detail = "FAILED: setting maxmemory back to 0: " + err.Error()
	} else if !refused {
		f.Detail = "FAILED: Redis did not refuse a write at maxmemory " + strconv.FormatInt(limit, 10)
	}
	return f
}

// chaosSave writes the history and the faults as JSON.
func chaosSave(t *testing.T, dir string, seed int64, ops []chaosOp, faults []chaosFault) {
	sorted := append([]chaosOp(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	b, err := json.MarshalIndent(map[string]any{"seed": seed, "faults": faults, "ops": sorted}, "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
	}
	if err != nil {
		t.Errorf("chaos: saving the history: %v", err)
	}
}

// chaosReplicaLines is the last n lines of the replicas' logs that name
// container, each prefixed with its log's name.
func chaosReplicaLines(arts, container string, n int) string {
	logs, _ := filepath.Glob(filepath.Join(arts, "replica-*.log"))
	var out []string
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		var mine []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, container) {
				mine = append(mine, filepath.Base(l)+": "+line)
			}
		}
		out = append(out, tail(mine, n)...)
	}
	return strings.Join(out, "\n")
}

// chaosWatchPoll is how often the test reads the checkpoints' heads.
const chaosWatchPoll = 20 * time.Millisecond

// watchCheckpoints reads the head of each container's checkpoint in the
// directory store at dir every chaosWatchPoll until stop, and sends the
// writes it saw (a new state token), per container.
func (cl *chaosCluster) watchCheckpoints(dir string, containers []string, stop <-chan struct{}) <-chan map[string][]chaosWrite {
	out := make(chan map[string][]chaosWrite, 1)
	go func() {
		saved := map[string][]chaosWrite{}
		last := map[string]string{}
		prev := cl.since()
		tick := time.NewTicker(chaosWatchPoll)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- saved
				return
			case <-tick.C:
			}
			// A write this poll sees came after the poll before read its
			// head, so after that poll began (prev).
			began := cl.since()
			for _, c := range containers {
				tok, _, ok := checkpointtest.Head(dir, c)
				if ok && tok != last[c] {
					last[c] = tok
					saved[c] = append(saved[c], chaosWrite{After: prev, By: cl.since()})
				}
			}
			prev = began
		}
	}()
	return out
}
