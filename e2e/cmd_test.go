package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/codeinterp/codeinterp/internal/devproxy"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// buildExtproc compiles the real binary once per test.
func buildExtproc(t testing.TB) string {
	t.Helper()
	// wasm-worker beside it, as make build and the image place it: the
	// server starts wasm interpreters from it.
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/extproc", "./cmd/wasm-worker")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/extproc ./cmd/wasm-worker: %v\n%s", err, out)
	}
	return filepath.Join(dir, "extproc")
}

// proc is a running extproc whose stderr (zap JSON lines) is collected.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{}
	done  chan error
}

func startProc(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, added: make(chan struct{}, 1), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.added <- struct{}{}:
			default:
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("extproc %s output:\n%s", args[0], strings.Join(p.all(), "\n"))
		}
	})
	return p
}

func (p *proc) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine waits for a stderr line for which match returns true.
func (p *proc) waitLine(t testing.TB, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	seen := 0
	for {
		lines := p.all()
		for _, l := range lines[seen:] {
			if match(l) {
				return l
			}
		}
		seen = len(lines)
		select {
		case <-p.added:
		case err := <-p.done:
			p.done <- err
			t.Fatalf("extproc exited (%v) before %s", err, what)
		case <-deadline:
			t.Fatalf("no %s after 3 minutes", what)
		}
	}
}

func (p *proc) stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("extproc exited with %v after SIGTERM", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("extproc did not exit after SIGTERM")
	}
}

// baseURL waits for `extproc dev`'s ready line and returns the
// OPENAI_BASE_URL it prints (http://host:port/v1).
func (p *proc) baseURL(t testing.TB) string {
	t.Helper()
	const ready = "extproc dev: OPENAI_BASE_URL="
	line := p.waitLine(t, "dev ready line", func(l string) bool { return strings.HasPrefix(l, ready) })
	return strings.Fields(strings.TrimPrefix(line, ready))[0]
}

func logField(line, field string) string {
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return ""
	}
	s, _ := m[field].(string)
	return s
}

// TestServeCommand runs `extproc serve`: health turns SERVING, metrics and
// readiness are served, a request through it is logged with its request
// id, and SIGTERM drains an exchange that is mid-run before exiting 0.
func TestServeCommand(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("import time\ntime.sleep(2)\nprint('slept')")}}
		}
		return reply{items: []string{m.message(firstStdoutLine(lastOutputs(c)[0].Get("output").Str))}}
	})
	p := startProc(t, bin, []string{"CODEINTERP_UPSTREAM_URL=" + m.URL() + "/v1/responses"},
		"serve", "--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
	serving := p.waitLine(t, "serving log line", func(l string) bool { return strings.Contains(l, `"msg":"serving"`) })
	grpcAddr, adminAddr := logField(serving, "grpc"), logField(serving, "admin")

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: extprocv3.ExternalProcessor_ServiceDesc.ServiceName})
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never SERVING: %v %v", r, err)
		}
	}
	for path, want := range map[string]string{"/readyz": "ok", "/healthz": "ok", "/metrics": "codeinterp_sandbox_sessions_max 4"} {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, no %q in %.300s", path, resp.StatusCode, want, b)
		}
	}

	// Envoy's part is played by devproxy, pointed at the server's port.
	up, _ := url.Parse(m.URL())
	px, err := devproxy.New(devproxy.Config{Upstream: up, Processor: extprocv3.NewExternalProcessorClient(cc),
		MessageTimeout: 10 * time.Second, MaxMessageTimeout: 900 * time.Second, AllowModeOverride: true, BufferLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	front := newHTTPServer(t, px)
	client := openai.NewClient(option.WithBaseURL(front+"/v1/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0),
		option.WithHeader("X-Request-Id", "e2e-serve-request-1"))
	type result struct {
		r   *responses.Response
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := client.Responses.New(context.Background(), ciParams("sleep then print", true))
		res <- result{r, err}
	}()
	// Stop the server while the code sleeps: the open stream must finish.
	for deadline := time.Now().Add(time.Minute); len(m.all()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the model")
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	got := <-res
	if got.err != nil {
		t.Fatalf("request during shutdown: %v", got.err)
	}
	if got.r.OutputText() != "slept" {
		t.Errorf("output %q", got.r.OutputText())
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not exit after draining")
	}
	line := p.waitLine(t, "request log line", func(l string) bool { return strings.Contains(l, `"msg":"request"`) })
	if logField(line, "request_id") != "e2e-serve-request-1" || logField(line, "outcome") != "completed" {
		t.Errorf("request log line %s", line)
	}
}

// TestDevCommand runs `extproc dev` as a user would and sends one request
// through it with the official client.
func TestDevCommand(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	var m *model
	m = newModel(t, sh, oneCallScript(&m, sh))
	p := startProc(t, bin, nil, "dev", "--listen", "127.0.0.1:0", "--upstream", m.URL(),
		"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
	base := p.baseURL(t)
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	r, err := client.Responses.New(context.Background(), ciParams(sh.prompt, true))
	if err != nil {
		t.Fatal(err)
	}
	calls := ciCalls(r)
	if len(calls) != 1 || calls[0].Outputs[0].Logs != "CODE_INTERPRETER_OK=385\n" || r.OutputText() != "CODE_INTERPRETER_OK=385" {
		t.Fatalf("output %s", r.RawJSON())
	}
	// The code ran in the wasm-worker built beside extproc, not in a
	// copy of the server.
	worker := filepath.Join(filepath.Dir(bin), "wasm-worker")
	p.waitLine(t, "the wasm workers line", func(l string) bool {
		return strings.Contains(l, `"msg":"wasm workers","binary":"`+worker+`"`)
	})
	p.stop(t)
}

// TestDemo runs the demo program (`make demo`) as the README tells users
// to: it must exit 0 and print a real code_interpreter_call with the
// program's output, streamed and not.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/extproc", "./cmd/extproc-demo")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	demo := exec.Command(filepath.Join(dir, "extproc-demo"), "--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
	var stdout, stderr strings.Builder
	demo.Stdout, demo.Stderr = &stdout, &stderr
	if err := demo.Run(); err != nil {
		t.Fatalf("extproc-demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"=== non-streaming", "=== streaming", `"type": "code_interpreter_call"`, "sum=385 mean=38.5",
		"response.code_interpreter_call.completed", "answer: The code printed sum=385 mean=38.5.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "code_interpreter_call ci_"); n != 2 {
		t.Errorf("demo printed %d code_interpreter_call summaries, want 2 (stream and non-stream)", n)
	}
}

// TestTwoReplicasShareRedis runs two `extproc dev` processes (each a
// server and its front proxy) on one real redis-server, as two replicas
// behind Envoy: a container made and filled through one is used through
// the other, and the file the code wrote there downloads through the first.
func TestTwoReplicasShareRedis(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	redisURL := redistest.Start(t)
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("rows = open('/mnt/data/in.csv').read().split()\n" +
				"open('/mnt/data/out.txt', 'w').write('rows=%d' % len(rows))\nprint('ROWS', len(rows))")}}
		}
		return reply{items: []string{m.message(firstStdoutLine(lastOutputs(c)[0].Get("output").Str))}}
	})
	env := []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + redisURL}
	start := func() openai.Client {
		p := startProc(t, bin, env, "dev", "--listen", "127.0.0.1:0", "--upstream", m.URL(),
			"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
		t.Cleanup(func() { p.stop(t) })
		base := p.baseURL(t)
		return openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	}
	a, b := start(), start()
	ctx := context.Background()
	ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{
		File: openai.File(strings.NewReader("x\ny\nz\n"), "in.csv", "text/csv")}); err != nil {
		t.Fatal(err)
	}
	p := ciParams("Count the rows.", true)
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
	r, err := b.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.OutputText() != "ROWS 3" || ciCalls(r)[0].ContainerID != ctr.ID {
		t.Fatalf("through the second replica: %s", r.RawJSON())
	}
	list, err := a.Containers.Files.List(ctx, ctr.ID, openai.ContainerFileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range list.Data {
		if f.Path != "/mnt/data/out.txt" {
			continue
		}
		resp, err := a.Containers.Files.Content.Get(ctx, ctr.ID, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "rows=3" {
			t.Fatalf("out.txt through the first replica: %q", body)
		}
		return
	}
	t.Fatalf("the first replica does not list out.txt: %+v", list.Data)
}

// TestDefaultStartIsQuiet: `extproc serve` on the default configuration
// (only its addresses moved off the default ports, and the pool's cgroup
// parent) says nothing at warn level or above while it starts: its own
// defaults agree, and warnings are for settings a user wrote.
func TestDefaultStartIsQuiet(t *testing.T) {
	bin := buildExtproc(t)
	cmd := exec.Command(bin, "serve")
	// A clean environment: the test process's own CODEINTERP_* variables
	// would be warned about, rightly.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"CODEINTERP_SERVER_LISTEN=127.0.0.1:0", "CODEINTERP_SERVER_ADMIN_LISTEN=127.0.0.1:0", "CODEINTERP_API_LISTEN=127.0.0.1:0",
		"CODEINTERP_SANDBOX_ISOLATION_CGROUP_PARENT=/codeinterp-e2e"}
	for _, k := range []string{"XDG_CACHE_HOME", "CODEINTERP_RUNTIME_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines []string
	for sc.Scan() {
		l := sc.Text()
		lines = append(lines, l)
		if lvl := logField(l, "level"); lvl != "" && lvl != "info" && lvl != "debug" {
			t.Errorf("a %s line on the default configuration: %s", lvl, l)
		}
		if strings.Contains(l, `"msg":"serving"`) {
			return
		}
	}
	t.Fatalf("extproc serve did not start:\n%s", strings.Join(lines, "\n"))
}
