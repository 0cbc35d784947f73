//go:build imagetest

package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
)

var (
	wasmImage   = flag.String("image", "", "the wasm image make image built (localhost/codeinterp/extproc:TAG)")
	gvisorImage = flag.String("image-gvisor", "", "the gVisor image make image VARIANT=gvisor built")
	runtimeName = flag.String("podman-runtime", "runc", "OCI runtime for podman (crun refuses hybrid-cgroup hosts)")
)

const gatewayDir = "../deploy/envoy/gateway"

// image returns the reference of a variant's image; the test fails, never
// skips, without it.
func image(t *testing.T, variant string) string {
	t.Helper()
	ref := *wasmImage
	if variant == "gvisor" {
		ref = *gvisorImage
	}
	if ref == "" {
		t.Fatalf("no %s image given: run `make image-test` (or pass -image and -image-gvisor)", variant)
	}
	if out, err := exec.Command("podman", "image", "exists", ref).CombinedOutput(); err != nil {
		t.Fatalf("podman has no image %s (%v %s): build it with `make image`", ref, err, out)
	}
	return ref
}

// pod is the server container of a Deployment manifest and its config file.
type pod struct {
	file   string
	ctr    corev1.Container
	volume map[string]corev1.Volume
	config map[string]string // ConfigMap data, by volume name
}

func loadPod(t *testing.T, file string) *pod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(gatewayDir, file))
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{file: file, volume: map[string]corev1.Volume{}, config: map[string]string{}}
	cms := map[string]map[string]string{}
	var dep *appsv1.Deployment
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch head.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatalf("%s: ConfigMap: %v", file, err)
			}
			cms[cm.Name] = cm.Data
		case "Deployment":
			// The file is the chart's rendering: the server's Deployment
			// (its one container named extproc) beside others, such as
			// the chart's Redis.
			d := &appsv1.Deployment{}
			if err := yaml.UnmarshalStrict([]byte(doc), d); err != nil {
				t.Fatalf("%s: Deployment: %v", file, err)
			}
			if c := d.Spec.Template.Spec.Containers; len(c) == 1 && c[0].Name == "extproc" {
				if dep != nil {
					t.Fatalf("%s: two Deployments of the server (%s, %s)", file, dep.Name, d.Name)
				}
				dep = d
			}
		}
	}
	if dep == nil {
		t.Fatalf("%s: want the server's Deployment (one container, named extproc)", file)
	}
	p.ctr = dep.Spec.Template.Spec.Containers[0]
	for _, v := range dep.Spec.Template.Spec.Volumes {
		p.volume[v.Name] = v
		if v.ConfigMap != nil {
			for k, val := range cms[v.ConfigMap.Name] {
				p.config[v.Name+"/"+k] = val
			}
		}
	}
	return p
}

// checkImage fails unless the manifest runs the image that was built:
// the manifest names it without podman's localhost/ prefix (a registry
// path after `podman push`, see image/README.md).
func (p *pod) checkImage(t *testing.T, ref string) {
	t.Helper()
	if want := strings.TrimPrefix(ref, "localhost/"); p.ctr.Image != want {
		t.Fatalf("%s runs image %q, but make image built %q (want %q there)", p.file, p.ctr.Image, ref, want)
	}
}

// Overrides of the manifest's configuration that this machine needs, and
// only those, passed as CODEINTERP_* environment variables the way a pod's
// env would: no Redis Service here (the store is tested elsewhere), and
// this host's cgroups are v1 (the wasm manifest's RuntimeClass is v2).
var hostOverrides = []string{
	"CODEINTERP_STORE_BACKEND=memory",
	"CODEINTERP_SANDBOX_ISOLATION_CGROUP=auto",
}

// runArgs are podman run's options for the pod: the manifest's security
// context, volumes and ports, plus what this host needs.
func (p *pod) runArgs(t *testing.T) []string {
	t.Helper()
	// Explicit rlimits: without them podman's runtimes fail to set any
	// here. Open files: this machine's hard limit, as a pod gets the
	// container runtime's (gVisor's sentry holds a host descriptor per
	// open file; 1024 is too few to import pandas).
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", "nproc=1024:1024",
		// Writable cgroups: the sandbox makes one per worker. Under
		// --privileged podman grants every capability, so the capability
		// list below is not in force here; TestManifestCapabilities runs
		// the wasm image with exactly that list instead.
		"--privileged",
		// The sandbox's cgroups go below the container's own, not the
		// host's root (the pod's cgroup namespace on cgroup v2 nodes).
		"--cgroupns=private",
	}
	sc := p.ctr.SecurityContext
	if sc == nil {
		t.Fatalf("%s: no securityContext", p.file)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		// podman would add writable /tmp, /run and /var/tmp; Kubernetes
		// does not: only the volumes are writable.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.RunAsUser != nil {
		args = append(args, "--user", fmt.Sprintf("%d:0", *sc.RunAsUser))
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(c))
		}
		for _, c := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(c))
		}
	}
	dir := t.TempDir()
	for _, vm := range p.ctr.VolumeMounts {
		v, ok := p.volume[vm.Name]
		switch {
		case !ok:
			t.Fatalf("%s: volumeMount %s has no volume", p.file, vm.Name)
		case v.ConfigMap != nil:
			host := filepath.Join(dir, vm.Name)
			if err := os.MkdirAll(host, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, val := range p.config {
				if name, ok := strings.CutPrefix(k, vm.Name+"/"); ok {
					if err := os.WriteFile(filepath.Join(host, name), []byte(val), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			args = append(args, "-v", host+":"+vm.MountPath+":ro")
		case v.EmptyDir != nil:
			// An emptyDir is a writable directory, executable, bounded by
			// its sizeLimit.
			opt := "rw,exec,nosuid,nodev"
			if v.EmptyDir.SizeLimit != nil {
				opt += fmt.Sprintf(",size=%d", v.EmptyDir.SizeLimit.Value())
			}
			args = append(args, "--tmpfs", vm.MountPath+":"+opt)
		default:
			t.Fatalf("%s: volume %s is neither a ConfigMap nor an emptyDir; teach the test", p.file, vm.Name)
		}
	}
	for _, e := range p.environ(t) {
		args = append(args, "-e", e)
	}
	// After the pod's own: podman keeps the last value of a name.
	for _, e := range hostOverrides {
		args = append(args, "-e", e)
	}
	return args
}

// expandRefs expands $(NAME) in s by vars as Kubernetes does for a
// container's env: an unknown name is left as written, $$ is a $.
func expandRefs(s string, vars map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 || i+1 == len(s) {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			s = s[i+2:]
		case s[i+1] == '(' && strings.IndexByte(s[i:], ')') > 0:
			j := i + strings.IndexByte(s[i:], ')')
			if val, ok := vars[s[i+2:j]]; ok {
				b.WriteString(val)
			} else {
				b.WriteString(s[i : j+1])
			}
			s = s[j+1:]
		default:
			b.WriteByte('$')
			s = s[i+1:]
		}
	}
}

// environ is the pod's env as Kubernetes would set it: values with
// $(NAME) of variables defined before expanded, the pod's IP from its
// fieldRef (loopback here), and each Secret's key (secretKeyRef) by a
// stand-in — the checkpoint key a fresh random one, as the chart's
// generated Secret holds. Any other source is an error: the test would
// run the image with less than the pod has.
func (p *pod) environ(t *testing.T) []string {
	t.Helper()
	var env []string
	set := map[string]string{}
	for _, e := range p.ctr.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expandRefs(e.Value, set)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			v = "127.0.0.1"
		case e.ValueFrom.SecretKeyRef != nil && e.Name == "CODEINTERP_CHECKPOINTS_KEY":
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				t.Fatal(err)
			}
			v = base64.StdEncoding.EncodeToString(key)
		case e.ValueFrom.SecretKeyRef != nil:
			v = "imagetest-stand-in-" + e.ValueFrom.SecretKeyRef.Key
		default:
			t.Fatalf("%s: env %s comes from a source this test cannot stand in for; teach the test", p.file, e.Name)
		}
		set[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

// container is a detached podman container; it is removed at cleanup and
// its logs are shown when the test failed.
type container struct{ name string }

var seq atomic.Int32

func podman(args ...string) *exec.Cmd {
	return exec.Command("podman", append([]string{"--runtime", *runtimeName}, args...)...)
}

func startContainer(t *testing.T, opts []string, ref string, cmd ...string) *container {
	t.Helper()
	c := &container{name: fmt.Sprintf("codeinterp-imagetest-%d-%d", os.Getpid(), seq.Add(1))}
	args := append([]string{"run", "-d", "--name", c.name}, opts...)
	args = append(append(args, ref), cmd...)
	out, err := podman(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("podman", "logs", c.name).CombinedOutput()
			t.Logf("podman logs %s:\n%s", c.name, logs)
		}
		_ = exec.Command("podman", "rm", "-f", "-t", "5", c.name).Run()
	})
	return c
}

// hostPort is where podman published the container's port on 127.0.0.1.
func (c *container) hostPort(t *testing.T, port int32) string {
	t.Helper()
	out, err := exec.Command("podman", "port", c.name, fmt.Sprintf("%d/tcp", port)).Output()
	if err != nil {
		t.Fatalf("podman port %s %d: %v", c.name, port, err)
	}
	addr := strings.TrimSpace(strings.Split(string(out), "\n")[0])
	if addr == "" {
		t.Fatalf("podman port %s %d: nothing published", c.name, port)
	}
	return addr
}

// running fails the test if the container has exited.
func (c *container) running(t *testing.T) {
	t.Helper()
	out, err := exec.Command("podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", c.name).Output()
	if err != nil {
		t.Fatalf("podman inspect %s: %v", c.name, err)
	}
	if st := strings.Fields(string(out)); len(st) == 0 || st[0] != "running" {
		t.Fatalf("container %s is no longer running: %s", c.name, out)
	}
}

func publish(p *pod) []string {
	var out []string
	for _, cp := range p.ctr.Ports {
		out = append(out, "-p", fmt.Sprintf("127.0.0.1::%d", cp.ContainerPort))
	}
	return out
}

func containerPort(t *testing.T, p *pod, name string) int32 {
	t.Helper()
	for _, cp := range p.ctr.Ports {
		if cp.Name == name {
			return cp.ContainerPort
		}
	}
	t.Fatalf("%s: no container port named %s", p.file, name)
	return 0
}

var variants = []struct{ name, manifest string }{
	{"wasm", "codeinterp.yaml"},
	{"gvisor", "codeinterp-gvisor.yaml"},
}

// TestServeHealthy runs each image as its manifest runs the pod, with the
// manifest's args (serve --config …), and waits for the readiness the
// probes ask for: gRPC health SERVING on the ext_proc port, and /readyz
// and /healthz on the admin port. The root filesystem is read-only, so
// the server can only be ready by using the compilation cache the image
// ships (a cache miss would fail writing it).
func TestServeHealthy(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ref := image(t, v.name)
			p := loadPod(t, v.manifest)
			p.checkImage(t, ref)
			if len(p.ctr.Args) == 0 || p.ctr.Args[0] != "serve" {
				t.Fatalf("%s: args %v do not start with serve (the image's entrypoint is extproc)", p.file, p.ctr.Args)
			}
			start := time.Now()
			c := startContainer(t, append(p.runArgs(t), publish(p)...), ref, p.ctr.Args...)
			grpcAddr := c.hostPort(t, containerPort(t, p, "grpc"))
			admin := "http://" + c.hostPort(t, containerPort(t, p, "admin"))

			cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			deadline := time.Now().Add(3 * time.Minute)
			var last string
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
				cancel()
				if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
					break
				}
				last = fmt.Sprint(r.GetStatus(), err)
				if time.Now().After(deadline) {
					t.Fatalf("gRPC health not SERVING after 3 minutes (last: %s)", last)
				}
				c.running(t)
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%s: gRPC health SERVING %.1fs after podman run", v.name, time.Since(start).Seconds())
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ext_proc.v3.ExternalProcessor"})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("gRPC health of the ext_proc service: %v %v, want SERVING", r.GetStatus(), err)
			}
			for _, path := range []string{"/readyz", "/healthz"} {
				resp, err := http.Get(admin + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
					t.Fatalf("GET %s: %d %q, want 200 ok", path, resp.StatusCode, body)
				}
			}
		})
	}
}

// TestDevResponses runs `extproc dev` inside the wasm image, in front of a
// scripted model on this host, and sends one Responses request with the
// code_interpreter tool through the official client: the code runs in the
// container's sandbox and the answer carries the code_interpreter_call.
func TestDevResponses(t *testing.T) {
	ref := image(t, "wasm")
	p := loadPod(t, "codeinterp.yaml")
	p.checkImage(t, ref)

	// The model listens on podman's bridge, which the container reaches as
	// host.containers.internal.
	gw, err := exec.Command("podman", "network", "inspect", "podman", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}").Output()
	if err != nil || net.ParseIP(strings.TrimSpace(string(gw))) == nil {
		t.Fatalf("podman network inspect podman: %v %q (the default bridge network is needed)", err, gw)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(strings.TrimSpace(string(gw)), "0"))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := &http.Server{Handler: scriptedModel(t, &calls), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	port := lis.Addr().(*net.TCPAddr).Port

	i := -1
	for j, a := range p.ctr.Args {
		if a == "--config" && j+1 < len(p.ctr.Args) {
			i = j + 1
		}
	}
	if i < 0 {
		t.Fatalf("%s: no --config in args %v", p.file, p.ctr.Args)
	}
	c := startContainer(t, append(p.runArgs(t), "-p", "127.0.0.1::8080"), ref,
		"dev", "--listen", "0.0.0.0:8080", "--upstream", fmt.Sprintf("http://host.containers.internal:%d", port),
		"--config", p.ctr.Args[i])
	base := "http://" + c.hostPort(t, 8080) + "/v1/"

	client := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-image-test"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{
		Model: "scripted",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Sum the squares of 1 to 10 with Python.")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(
			responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{})},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
	}
	// dev listens once its sandbox is warm; until then the port refuses.
	var r *responses.Response
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err = client.Responses.New(ctx, params)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Responses request through extproc dev in the container: %v", err)
		}
		c.running(t)
		time.Sleep(200 * time.Millisecond)
	}
	var found bool
	for _, it := range r.Output {
		if it.Type != "code_interpreter_call" {
			continue
		}
		found = true
		ci := it.AsCodeInterpreterCall()
		if ci.Status != "completed" || !strings.HasPrefix(ci.ContainerID, "cntr_") || ci.Code != modelCode {
			t.Errorf("code_interpreter_call: status %q container %q code %q", ci.Status, ci.ContainerID, ci.Code)
		}
		if len(ci.Outputs) != 1 || ci.Outputs[0].Logs != "385\n" {
			t.Errorf("code_interpreter_call outputs = %+v, want the logs 385", ci.Outputs)
		}
	}
	if !found {
		t.Fatalf("no code_interpreter_call in the response:\n%s", r.RawJSON())
	}
	if got := r.OutputText(); got != "The code printed 385." {
		t.Errorf("answer %q, want the model's answer from the code's output", got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the model was called %d times, want 2 (the call, then the follow-up with its output)", n)
	}
	// The image's wasm-worker was built with its extproc, so the server
	// starts interpreters from it rather than from itself.
	logs, err := exec.Command("podman", "logs", c.name).CombinedOutput()
	if err != nil || !strings.Contains(string(logs), `"msg":"wasm workers","binary":"/usr/local/bin/wasm-worker"`) {
		t.Errorf("the server in the image does not use /usr/local/bin/wasm-worker (%v):\n%s", err, logs)
	}
}

// modelCode is what the scripted model asks the sandbox to run.
const modelCode = "print(sum(i * i for i in range(1, 11)))"

// scriptedModel answers the Responses API as a model given a function
// tool: first it calls code_interpreter, then it reports the output.
func scriptedModel(t *testing.T, calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		req := gjson.ParseBytes(body)
		if fn := req.Get(`tools.#(name=="code_interpreter")`); fn.Get("type").Str != "function" {
			t.Errorf("model: request without the code_interpreter function tool: %s", body)
			http.Error(w, "no function tool", http.StatusBadRequest)
			return
		}
		var output string
		req.Get("input").ForEach(func(_, it gjson.Result) bool {
			if it.Get("type").Str == "function_call_output" {
				output = it.Get("output").Str
			}
			return true
		})
		var item map[string]any
		if output == "" {
			args, _ := json.Marshal(map[string]string{"code": modelCode})
			item = map[string]any{"id": "fc_1", "type": "function_call", "status": "completed",
				"arguments": string(args), "call_id": "call_1", "name": "code_interpreter"}
		} else {
			printed := "nothing"
			if _, rest, ok := strings.Cut(output, "stdout:\n"); ok {
				printed, _, _ = strings.Cut(rest, "\n")
			}
			item = map[string]any{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "annotations": []any{},
					"text": "The code printed " + printed + "."}}}
		}
		now := time.Now().Unix()
		resp, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("resp_%d", calls.Load()), "object": "response", "created_at": now, "status": "completed",
			"model": "scripted", "output": []any{item}, "parallel_tool_calls": true, "tool_choice": "auto",
			"tools": json.RawMessage(req.Get("tools").Raw), "temperature": 1.0, "top_p": 1.0,
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
				"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	})
}

// execResult is what `extproc exec` prints.
type execResult struct {
	Status string `json:"status"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Images []struct {
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"images"`
}

func runExec(t *testing.T, opts []string, ref string, args ...string) execResult {
	t.Helper()
	full := append(append(append([]string{"run", "--rm", "--network=none"}, opts...), ref, "exec"), args...)
	var stdout, stderr bytes.Buffer
	cmd := podman(full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(full, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	var res execResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("exec printed no JSON result (%v):\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return res
}

// TestExec runs `extproc exec` in each image under its pod's settings: the
// wasm provider in both images, the gvisor provider (Debian's python3 with
// numpy, pandas and matplotlib, in runsc) in the gVisor image.
func TestExec(t *testing.T) {
	cases := []struct {
		variant, provider, code, want string
		images                        bool
	}{
		{"wasm", "wasm", "import sys, sqlite3, zlib\nprint(sys.platform, sum(range(10)))", "wasi 45\n", false},
		{"gvisor", "wasm", "import sys\nprint(sys.platform, sum(range(10)))", "wasi 45\n", false},
		{"gvisor", "gvisor", "import sys, numpy as np, pandas as pd, matplotlib.pyplot as plt\n" +
			"df = pd.DataFrame({'x': np.arange(5), 'y': np.arange(5) ** 2})\n" +
			"df.plot(x='x', y='y'); plt.title('squares'); plt.show()\n" +
			"print(sys.platform, int(df.y.sum()))", "linux 30\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.variant+"/"+tc.provider, func(t *testing.T) {
			ref := image(t, tc.variant)
			p := loadPod(t, variants[map[string]int{"wasm": 0, "gvisor": 1}[tc.variant]].manifest)
			res := runExec(t, p.runArgs(t), ref, "--provider", tc.provider, "-c", tc.code)
			if res.Status != "completed" || res.Stdout != tc.want {
				t.Fatalf("exec --provider %s: status %q stdout %q stderr %q, want completed %q", tc.provider, res.Status, res.Stdout, res.Stderr, tc.want)
			}
			if tc.images {
				if len(res.Images) != 1 || res.Images[0].MediaType != "image/png" {
					t.Fatalf("want one PNG figure, got %d images", len(res.Images))
				}
				png, err := base64.StdEncoding.DecodeString(res.Images[0].Data)
				if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
					t.Fatalf("the figure is not a PNG (%v)", err)
				}
			}
		})
	}
}

// TestGVisorImageRunsc: the gVisor image ships the pinned runsc (built
// from the Go module proxy, not Debian's package), root-owned, where
// CODEINTERP_RUNSC_DIR points, and no other runsc on its PATH.
func TestGVisorImageRunsc(t *testing.T) {
	ref := image(t, "gvisor")
	run := func(args ...string) ([]byte, error) {
		full := append(append([]string{"run", "--rm", "--network=none"}, loadPod(t, variants[1].manifest).runArgs(t)...), args...)
		return podman(full...).CombinedOutput()
	}
	out, err := run("--entrypoint", "/opt/codeinterp/runsc/runsc", ref, "--version")
	if first, _, _ := strings.Cut(string(out), "\n"); err != nil || first != "runsc version "+gvisor.PinnedRunscVersion {
		t.Fatalf("the image's runsc --version: %q (%v), want %q", out, err, "runsc version "+gvisor.PinnedRunscVersion)
	}
	out, err = run("--entrypoint", "/bin/sh", ref, "-c",
		`stat -c '%u %a' /opt/codeinterp/runsc/runsc; echo "$CODEINTERP_RUNSC_DIR"; command -v runsc || echo none`)
	if err != nil || string(out) != "0 755\n/opt/codeinterp/runsc\nnone\n" {
		t.Fatalf("the image's runsc: %q (%v); want owner 0, mode 755, CODEINTERP_RUNSC_DIR=/opt/codeinterp/runsc, no runsc on PATH", out, err)
	}
}

// TestExecWithoutCgroupNamespace runs the wasm image as a Kubernetes node
// on cgroup v1 runs a pod: without a private cgroup namespace, so the
// container sees its own cgroup subtree mounted at /sys/fs/cgroup while
// /proc/PID/cgroup names groups from the host's root. The pool used to
// refuse every session there ("pid 23 is in memory:/libpod_parent/…/
// codeinterp/wasm-1-…, want /codeinterp/wasm-1-…").
func TestExecWithoutCgroupNamespace(t *testing.T) {
	for i, variant := range []string{"wasm", "gvisor"} {
		t.Run(variant, func(t *testing.T) {
			ref := image(t, variant)
			p := loadPod(t, variants[i].manifest)
			var opts []string
			for _, a := range p.runArgs(t) {
				if a == "--cgroupns=private" {
					a = "--cgroupns=host"
				}
				opts = append(opts, a)
			}
			res := runExec(t, opts, ref, "--provider", variant, "-c", "print(sum(range(10)))")
			if res.Status != "completed" || res.Stdout != "45\n" {
				t.Fatalf("exec with the host's cgroup namespace: status %q stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestManifestCapabilities runs the wasm image with exactly what the wasm
// manifest grants, which --privileged (needed here for writable cgroups)
// would override: its capabilities, no privilege escalation, podman's
// default seccomp profile, a read-only root. Cgroups are off for this one
// run (the only thing that needs --privileged here); starting a worker
// still needs everything else — its network and IPC namespaces, the drop
// to uid 65534, seccomp, no_new_privs.
func TestManifestCapabilities(t *testing.T) {
	ref := image(t, "wasm")
	p := loadPod(t, "codeinterp.yaml")
	var opts []string
	for _, a := range p.runArgs(t) {
		if a != "--privileged" {
			opts = append(opts, a)
		}
	}
	res := runExec(t, opts, ref, "--cgroup", "off", "-c", "print(sum(range(10)))")
	if res.Status != "completed" || res.Stdout != "45\n" {
		t.Fatalf("exec with only the manifest's capabilities: status %q stdout %q stderr %q, want completed 45", res.Status, res.Stdout, res.Stderr)
	}
}
