package envoy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/codeinterp/codeinterp/internal/config"
)

// The chart the manifests under gateway/ are rendered from, and the
// release they are rendered as.
const (
	chartDir         = "../../charts/codeinterp"
	releaseName      = "codeinterp"
	releaseNamespace = "codeinterp"
)

// helmBinary is the pinned helm (runtime/build-helm.sh): CODEINTERP_HELM,
// else the build script's cache path. The test fails, never skips,
// without it.
func helmBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CODEINTERP_HELM")
	if path == "" {
		out, err := exec.Command("bash", "../../runtime/build-helm.sh", "--print-path").Output()
		if err != nil {
			t.Fatalf("runtime/build-helm.sh --print-path: %v", err)
		}
		path = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no helm at %s (%v): run `make helm` (runtime/build-helm.sh builds the pinned helm)", path, err)
	}
	return path
}

// helmTemplate renders the chart with real Helm; args are extra flags
// (-f FILE, --set K=V). It returns the manifests, or Helm's error output.
func helmTemplate(t *testing.T, args ...string) ([]byte, string, error) {
	t.Helper()
	full := append([]string{"template", releaseName, chartDir, "--namespace", releaseNamespace}, args...)
	cmd := exec.Command(helmBinary(t), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.String(), err
}

// chartCase is one documented value set and what its rendering leaves out.
type chartCase struct {
	name string
	args []string
	opts checkOptions
	// cluster: what the cluster holds beside the release that the
	// rendering relies on (besides the model's Service, modelServices).
	cluster string
}

// platformGateway is a Gateway a platform team runs already (the values'
// gateway.create=false): its own namespace, listeners that admit routes
// from every namespace, and the ClientTrafficPolicy codeinterp needs on it
// (docs/deploy.md).
const platformGateway = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: envoy-gateway
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: shared
  namespace: gateways
spec:
  gatewayClassName: envoy-gateway
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes:
      namespaces:
        from: All
  - name: internal
    protocol: HTTP
    port: 8080
    allowedRoutes:
      namespaces:
        from: Same
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: ClientTrafficPolicy
metadata:
  name: shared
  namespace: gateways
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: Gateway
    name: shared
  connection:
    bufferLimit: 16Mi
  timeout:
    http:
      streamIdleTimeout: 900s
`

// existingGatewayValues attach the release to platformGateway's listener
// that admits it.
const existingGatewayValues = "gateway.create=false,gateway.name=shared,gateway.namespace=gateways,gateway.sectionName=http"

// chartMatrix: the documented value sets (README, the chart's values.yaml)
// the chart must render into a deployment the checks accept.
var chartMatrix = []chartCase{
	{"defaults", nil, checkOptions{provider: config.ProviderWASM}, ""},
	{"gvisor", []string{"--set", "provider=gvisor"}, checkOptions{provider: config.ProviderGVisor}, ""},
	{"gvisor unprivileged", []string{"--set", "provider=gvisor,gvisor.privileged=false,gvisor.platform=ptrace"}, checkOptions{provider: config.ProviderGVisor}, ""},
	{"gvisor s3", []string{"--set", "provider=gvisor,checkpoints.store=s3,checkpoints.s3.bucket=my-codeinterp," +
		"checkpoints.s3.endpoint=https://s3.eu-west-1.amazonaws.com,checkpoints.s3.region=eu-west-1," +
		"checkpoints.s3.credentialsSecret.name=codeinterp-s3"}, checkOptions{provider: config.ProviderGVisor}, ""},
	{"wasm s3 three replicas", []string{"--set", "checkpoints.store=s3,checkpoints.s3.bucket=b,checkpoints.s3.endpoint=http://minio.storage:9000," +
		"checkpoints.s3.pathStyle=true,autoscaling.enabled=false,replicas=3"},
		checkOptions{provider: config.ProviderWASM, noAutoscaling: true}, ""},
	{"checkpoints on a shared claim", []string{"--set", "checkpoints.persistence.enabled=true,checkpoints.persistence.storageClass=nfs"},
		checkOptions{provider: config.ProviderWASM}, ""},
	{"external redis", []string{"--set", "redis.enabled=false,redis.external.url=rediss://redis.example.internal:6380/2," +
		"redis.external.passwordSecret.name=ops-redis"}, checkOptions{provider: config.ProviderWASM}, ""},
	{"external redis without password", []string{"--set", "redis.enabled=false,redis.external.url=redis://10.0.0.9:6379/0"},
		checkOptions{provider: config.ProviderWASM}, ""},
	{"autoscaling off", []string{"--set", "autoscaling.enabled=false,replicas=2"}, checkOptions{provider: config.ProviderWASM, noAutoscaling: true}, ""},
	{"network policies off", []string{"--set", "networkPolicy.enabled=false"}, checkOptions{provider: config.ProviderWASM, noNetworkPolicy: true}, ""},
	{"gvisor 16g tier", []string{"--set", "provider=gvisor,sandbox.memoryTier=16g,sandbox.maxSessions=2"}, checkOptions{provider: config.ProviderGVisor}, ""},
	{"wasm 4g tier", []string{"--set", "sandbox.memoryTier=4g,sandbox.maxSessions=2"}, checkOptions{provider: config.ProviderWASM}, ""},
	{"observability", []string{"--set", "serviceMonitor.enabled=true,otel.enabled=true,otel.endpoint=http://otel-collector.monitoring:4317"},
		checkOptions{provider: config.ProviderWASM}, ""},
	{"existing secrets", []string{"-f", filepath.Join(gatewayDir, "wasm.values.yaml")}, checkOptions{provider: config.ProviderWASM}, ""},
	{"model in another namespace", []string{"--set", "model.service.namespace=models"}, checkOptions{provider: config.ProviderWASM}, ""},
	{"model outside the cluster by name", []string{"--set", "model.upstream=external,model.external.host=models.example.com"},
		checkOptions{provider: config.ProviderWASM}, ""},
	{"model outside the cluster by address", []string{"--set", "model.upstream=external,model.external.host=10.20.0.5," +
		"model.external.port=8000,model.external.tls=false,provider=gvisor"}, checkOptions{provider: config.ProviderGVisor}, ""},
	{"existing gateway", []string{"--set", existingGatewayValues + ",provider=gvisor"}, checkOptions{provider: config.ProviderGVisor}, platformGateway},
	{"existing gateway, external model", []string{"--set", existingGatewayValues + ",gateway.filesUpstream=true," +
		"model.upstream=external,model.external.host=llm.internal.example.com,model.external.port=8443"},
		checkOptions{provider: config.ProviderWASM}, platformGateway},
}

// helm lint --strict: Helm's own checks of the chart (templates, schema,
// Chart.yaml), for the defaults and each provider.
func TestChartLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "provider=gvisor"}} {
		out, err := exec.Command(helmBinary(t), append([]string{"lint", "--strict", chartDir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm lint --strict %v: %v\n%s", args, err, out)
		}
	}
}

// Each value set renders into manifests that decode into the real types,
// pass the deploy checks and the CRDs' schemas and CEL rules, that Envoy
// Gateway's own translator accepts whole, and that carry a configuration
// the server's own validate-config accepts.
func TestChartMatrix(t *testing.T) {
	validators := loadCRDValidators(t)
	extproc := extprocBinary(t)
	egctlBinary(t)
	for _, tc := range chartMatrix {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := helmTemplate(t, tc.args...)
			if err != nil {
				t.Fatalf("helm template %v: %v\n%s", tc.args, err, stderr)
			}
			files := map[string][]byte{"rendering": out}
			if tc.cluster != "" {
				// The rendering alone makes no Gateway: it attaches to the cluster's.
				alone, err := loadManifests(files)
				if err != nil {
					t.Fatalf("the rendering does not decode:\n%v", err)
				}
				if n := len(alone.gateways) + len(alone.gatewayClasses) + len(alone.clientPolicies); n != 0 {
					t.Fatalf("gateway.create=false, but the rendering holds %d Gateways, GatewayClasses or ClientTrafficPolicies", n)
				}
				files["cluster"] = []byte(tc.cluster)
			}
			m, err := loadManifests(files)
			if err != nil {
				t.Fatalf("the rendering does not decode:\n%v", err)
			}
			if err := checkManifestsWith(m, tc.opts); err != nil {
				t.Fatalf("the rendering is inconsistent:\n%v", err)
			}
			if n, err := validateCustomResources(validators, files); err != nil || n < 7 {
				t.Fatalf("the API server would reject (%d custom resources checked):\n%v", n, err)
			}
			checkRenderedSecrets(t, m)
			validateRenderedConfig(t, extproc, m)
			checkTranslated(t, out, []byte(tc.cluster), m)
		})
	}
}

// checkRenderedSecrets: every Secret the server reads is either rendered
// with that key or named in the values as the operator's (existingSecret,
// passwordSecret, credentialsSecret).
func checkRenderedSecrets(t *testing.T, m *manifests) {
	t.Helper()
	operators := map[string]bool{"codeinterp-checkpoints": true, "codeinterp-redis": true, "codeinterp-s3": true, "ops-redis": true}
	d := server(m).d
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		found := false
		for _, s := range m.secrets {
			if s.Name == ref.Name {
				found = true
				if len(s.Data[ref.Key]) == 0 {
					t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
				}
			}
		}
		if !found && !operators[ref.Name] {
			t.Errorf("env %s: Secret %s is neither rendered nor the operator's", e.Name, ref.Name)
		}
	}
}

var (
	extprocOnce sync.Once
	extprocPath string
	extprocErr  error
)

// extprocBinary builds cmd/extproc once per test binary.
func extprocBinary(t *testing.T) string {
	t.Helper()
	extprocOnce.Do(func() {
		dir, err := os.MkdirTemp("", "codeinterp-chart-test-")
		if err != nil {
			extprocErr = err
			return
		}
		extprocPath = filepath.Join(dir, "extproc")
		out, err := exec.Command("go", "build", "-o", extprocPath, "github.com/codeinterp/codeinterp/cmd/extproc").CombinedOutput()
		if err != nil {
			extprocErr = err
			extprocPath = string(out)
		}
	})
	if extprocErr != nil {
		t.Fatalf("go build ./cmd/extproc: %v\n%s", extprocErr, extprocPath)
	}
	return extprocPath
}

// validateRenderedConfig runs `extproc validate-config` on the rendered
// codeinterp.yaml with the container's CODEINTERP_* environment, as serve
// loads it in the pod (Secrets' values stood in, the pod's IP given).
func validateRenderedConfig(t *testing.T, extproc string, m *manifests) {
	t.Helper()
	d := server(m).d
	c := d.Spec.Template.Spec.Containers[0]
	var data string
	for _, cm := range m.configMaps {
		if cm.Name == "codeinterp-config" {
			data = cm.Data["codeinterp.yaml"]
		}
	}
	if data == "" {
		t.Fatal("no codeinterp-config ConfigMap with codeinterp.yaml")
	}
	file := filepath.Join(t.TempDir(), "codeinterp.yaml")
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	environ, err := containerEnviron(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(extproc, "validate-config", file)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, environ...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok: ") {
		t.Fatalf("extproc validate-config refuses the rendered configuration: %v\n%s\n--- codeinterp.yaml\n%s", err, out, data)
	}
	if strings.Contains(string(out), "warning:") {
		t.Fatalf("extproc validate-config warns:\n%s", out)
	}
}

// The checked-in manifests are what the chart renders for the documented
// value sets beside them: a change to the chart without `make
// chart-render` (or an edit by hand) fails here.
func TestChartRenderingsCheckedIn(t *testing.T) {
	for provider, file := range serverManifests {
		t.Run(provider, func(t *testing.T) {
			want, stderr, err := helmTemplate(t, "-f", filepath.Join(gatewayDir, provider+".values.yaml"))
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			got, err := os.ReadFile(filepath.Join(gatewayDir, file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				for i := 0; i < len(gl) || i < len(wl); i++ {
					var g, w string
					if i < len(gl) {
						g = gl[i]
					}
					if i < len(wl) {
						w = wl[i]
					}
					if g != w {
						t.Fatalf("%s differs from the chart's rendering at line %d:\n  checked in: %q\n  rendered:   %q\nrun `make chart-render`", file, i+1, g, w)
					}
				}
			}
		})
	}
}

// A misspelt or unknown value, or one out of its range, is refused by the
// schema before anything renders, naming the field.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	cases := []struct {
		set, want string
	}{
		{"provder=gvisor", "'provder' not allowed"},
		{"provider=gvisr", "/provider"},
		{"redis.persistance.enabled=false", "'persistance' not allowed"},
		{"checkpoints.store=gcs", "/checkpoints/store"},
		{"sandbox.memoryTier=2g", "/sandbox/memoryTier"},
		{"gateway.messageTimeout=ten minutes", "/gateway/messageTimeout"},
		{"autoscaling.minReplicas=1", "/autoscaling/minReplicas"},
		{"redis.external.url=redis://:secret@host:6379/0", "/redis/external/url"},
		{"gvisor.platform=kvmm", "/gvisor/platform"},
		{"model.upstream=extrenal", "/model/upstream"},
		{"model.external.host=https://models.example.com", "/model/external/host"},
		{"model.extrenal.host=models.example.com", "'extrenal' not allowed"},
		{"gateway.create=no", "/gateway/create"},
		{"gateway.sectionName=HTTP", "/gateway/sectionName"},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			out, stderr, err := helmTemplate(t, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s rendered %d bytes; want the schema to refuse it", tc.set, len(out))
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("helm template --set %s: %s\nwant the error to name %q", tc.set, stderr, tc.want)
			}
		})
	}
}

// Values the schema allows but that cannot make a working deployment are
// refused by the templates with what to set.
func TestChartRefusesIncompleteValues(t *testing.T) {
	cases := []struct {
		set, want string
	}{
		{"checkpoints.store=s3", "set checkpoints.s3.bucket"},
		{"redis.enabled=false", "set redis.external.url"},
		{"sandbox.memoryTier=16g", "the wasm provider's interpreters address at most 4GiB"},
		{"otel.enabled=true", "set otel.endpoint"},
		{"model.upstream=external", "set model.external.host"},
		{"model.upstream=external,model.external.host=10.20.0.5", "TLS needs the DNS name its certificate carries"},
		{"gateway.namespace=gateways", "gateway.namespace is only for gateway.create=false"},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			_, stderr, err := helmTemplate(t, "--set", tc.set)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("helm template --set %s: err %v, %s\nwant an error containing %q", tc.set, err, stderr, tc.want)
			}
		})
	}
}

// NOTES.txt, as `helm install` prints it, sends the operator to the
// Gateway the routes attach to and says what that Gateway and an
// external model need.
func TestChartNotes(t *testing.T) {
	cases := []struct {
		set  string
		want []string
	}{
		{"", []string{"kubectl -n codeinterp wait --for=condition=Programmed gateway/llm", "owning-gateway-namespace=codeinterp", "8080:80 &"}},
		{existingGatewayValues + ",model.upstream=external,model.external.host=models.example.com", []string{
			"kubectl -n gateways wait --for=condition=Programmed gateway/shared",
			"The routes attach to your Gateway gateways/shared (listener http)",
			"connection.bufferLimit >= 16Mi and timeout.http.streamIdleTimeout >= 600s",
			"owning-gateway-namespace=gateways",
			"models.example.com:443 through the Backend\n   codeinterp-model: Envoy Gateway must run with extensionApis.enableBackend: true",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			args := []string{"install", releaseName, chartDir, "--namespace", releaseNamespace, "--dry-run=client"}
			if tc.set != "" {
				args = append(args, "--set", tc.set)
			}
			out, err := exec.Command(helmBinary(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm install --dry-run=client: %v\n%s", err, out)
			}
			_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
			if !ok {
				t.Fatalf("helm install printed no NOTES:\n%.2000s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, notes)
				}
			}
		})
	}
}
