package envoy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/internal/config"
)

const gatewayDir = "gateway"

// newObject returns the Go type for a manifest's apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "node.k8s.io/v1 RuntimeClass":
		return &nodev1.RuntimeClass{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "gateway.networking.k8s.io/v1 GatewayClass":
		return &gwapiv1.GatewayClass{}, nil
	case "gateway.networking.k8s.io/v1 Gateway":
		return &gwapiv1.Gateway{}, nil
	case "gateway.networking.k8s.io/v1 HTTPRoute":
		return &gwapiv1.HTTPRoute{}, nil
	case "gateway.envoyproxy.io/v1alpha1 EnvoyExtensionPolicy":
		return &egv1a1.EnvoyExtensionPolicy{}, nil
	case "gateway.envoyproxy.io/v1alpha1 ClientTrafficPolicy":
		return &egv1a1.ClientTrafficPolicy{}, nil
	case "gateway.envoyproxy.io/v1alpha1 Backend":
		return &egv1a1.Backend{}, nil
	case "gateway.networking.k8s.io/v1beta1 ReferenceGrant":
		return &gwapiv1b1.ReferenceGrant{}, nil
	}
	return nil, fmt.Errorf("no Go type known for %s %s", apiVersion, kind)
}

// serviceMonitor is the part of Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart writes; its module is not a
// dependency, and strict decoding refuses anything else.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifests are the decoded documents, by type.
type manifests struct {
	namespaces      []*corev1.Namespace
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	claims          []*corev1.PersistentVolumeClaim
	serviceMonitors []*serviceMonitor
	services        []*corev1.Service
	deployments     []*appsv1.Deployment
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	pdbs            []*policyv1.PodDisruptionBudget
	runtimeClasses  []*nodev1.RuntimeClass
	gatewayClasses  []*gwapiv1.GatewayClass
	gateways        []*gwapiv1.Gateway
	routes          []*gwapiv1.HTTPRoute
	extPolicies     []*egv1a1.EnvoyExtensionPolicy
	clientPolicies  []*egv1a1.ClientTrafficPolicy
	backends        []*egv1a1.Backend
	refGrants       []*gwapiv1b1.ReferenceGrant
	netPolicies     []*networkingv1.NetworkPolicy
	documentsByFile map[string]int
}

// decodeManifest decodes one YAML document strictly (unknown or duplicate
// fields fail) into its real Go type.
func decodeManifest(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

func (m *manifests) add(obj any) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		m.namespaces = append(m.namespaces, o)
	case *corev1.ConfigMap:
		m.configMaps = append(m.configMaps, o)
	case *corev1.Secret:
		m.secrets = append(m.secrets, o)
	case *corev1.ServiceAccount:
		m.serviceAccounts = append(m.serviceAccounts, o)
	case *corev1.PersistentVolumeClaim:
		m.claims = append(m.claims, o)
	case *serviceMonitor:
		m.serviceMonitors = append(m.serviceMonitors, o)
	case *corev1.Service:
		m.services = append(m.services, o)
	case *appsv1.Deployment:
		m.deployments = append(m.deployments, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		m.hpas = append(m.hpas, o)
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	case *nodev1.RuntimeClass:
		m.runtimeClasses = append(m.runtimeClasses, o)
	case *gwapiv1.GatewayClass:
		m.gatewayClasses = append(m.gatewayClasses, o)
	case *gwapiv1.Gateway:
		m.gateways = append(m.gateways, o)
	case *gwapiv1.HTTPRoute:
		m.routes = append(m.routes, o)
	case *egv1a1.EnvoyExtensionPolicy:
		m.extPolicies = append(m.extPolicies, o)
	case *egv1a1.ClientTrafficPolicy:
		m.clientPolicies = append(m.clientPolicies, o)
	case *egv1a1.Backend:
		m.backends = append(m.backends, o)
	case *gwapiv1b1.ReferenceGrant:
		m.refGrants = append(m.refGrants, o)
	case *networkingv1.NetworkPolicy:
		m.netPolicies = append(m.netPolicies, o)
	}
}

func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// loadManifests decodes every document of the given files.
func loadManifests(files map[string][]byte) (*manifests, error) {
	m := &manifests{documentsByFile: map[string]int{}}
	var errs []error
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		docs, err := splitDocuments(files[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		for i, d := range docs {
			obj, err := decodeManifest(d)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s document %d: %w", name, i+1, err))
				continue
			}
			m.add(obj)
			m.documentsByFile[name]++
		}
	}
	return m, errors.Join(errs...)
}

// The manifests under gateway/ are `helm template` renderings of
// charts/codeinterp, one per sandbox provider, each complete (apply one):
// chart_test.go renders them again and fails when they drift.
var serverManifests = map[string]string{
	config.ProviderWASM:   "codeinterp.yaml",
	config.ProviderGVisor: "codeinterp-gvisor.yaml",
}

// providers lists the sandbox providers with a server manifest, sorted.
func providers() []string {
	out := make([]string, 0, len(serverManifests))
	for p := range serverManifests {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// readGatewayFiles reads the rendering of one sandbox provider: what one
// `kubectl apply` deploys.
func readGatewayFiles(t *testing.T, provider string) map[string][]byte {
	t.Helper()
	server, ok := serverManifests[provider]
	if !ok {
		t.Fatalf("no server manifest for provider %q", provider)
	}
	data, err := os.ReadFile(filepath.Join(gatewayDir, server))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{server: data}
}

// Every manifest in the directory is a rendering some test checks, and
// every values file beside them renders one.
func TestGatewayFilesAccountedFor(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(gatewayDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", gatewayDir, err)
	}
	var known []string
	for p, f := range serverManifests {
		known = append(known, f, p+".values.yaml")
	}
	for _, p := range paths {
		if !slices.Contains(known, filepath.Base(p)) {
			t.Errorf("%s is neither a rendering nor its values: no test validates it", p)
		}
	}
}

func one[T any](kind string, items []T, fail func(string, ...any)) T {
	var zero T
	if len(items) != 1 {
		fail("want exactly one %s, found %d", kind, len(items))
		return zero
	}
	return items[0]
}

// named returns the one item called name.
func named[T metav1.Object](kind, name string, items []T, fail func(string, ...any)) T {
	var zero T
	var found []T
	for _, it := range items {
		if it.GetName() == name {
			found = append(found, it)
		}
	}
	if len(found) != 1 {
		fail("want exactly one %s %s, found %d", kind, name, len(found))
		return zero
	}
	return found[0]
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

// serverConfig parses the server configuration carried by the ConfigMap
// with the real config package (strict decoding and validation).
func serverConfig(m *manifests, d *appsv1.Deployment) (*config.Config, string, error) {
	c := d.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		return nil, "", fmt.Errorf("container %s: no --config FILE argument in %v", c.Name, c.Args)
	}
	path := c.Args[i+1]
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(path, vm.MountPath+"/") {
			continue
		}
		key := strings.TrimPrefix(path, vm.MountPath+"/")
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			for _, cm := range m.configMaps {
				if cm.Name != v.ConfigMap.Name || cm.Namespace != d.Namespace {
					continue
				}
				data, ok := cm.Data[key]
				if !ok {
					return nil, "", fmt.Errorf("ConfigMap %s has no key %q", cm.Name, key)
				}
				environ, err := containerEnviron(c)
				if err != nil {
					return nil, "", err
				}
				// As config.LoadEnv (serve, validate-config): file over
				// the defaults, then the environment, then validation.
				cfg, err := config.Parse([]byte(data))
				if err == nil {
					_, err = cfg.ApplyEnv(environ)
				}
				if err == nil {
					err = cfg.Validate()
				}
				if err != nil {
					return nil, "", fmt.Errorf("ConfigMap %s key %s: %w", cm.Name, key, err)
				}
				return cfg, cm.Name, nil
			}
			return nil, "", fmt.Errorf("volume %s references ConfigMap %s, which is not defined", v.Name, v.ConfigMap.Name)
		}
	}
	return nil, "", fmt.Errorf("--config %s is not on a ConfigMap volume", path)
}

// secretEnv are the configuration fields a Secret supplies (secretKeyRef):
// the manifest cannot show their value, so a valid stand-in is checked in
// its place. Any other valueFrom is an error.
var secretEnv = map[string]string{
	"CODEINTERP_CHECKPOINTS_KEY":           base64.StdEncoding.EncodeToString(make([]byte, 32)),
	"CODEINTERP_CHECKPOINTS_S3_ACCESS_KEY": "AKIAEXAMPLEEXAMPLE00",
	"CODEINTERP_CHECKPOINTS_S3_SECRET_KEY": "stand-in-secret-key-of-forty-characters0",
}

// containerEnviron returns the container's CODEINTERP_* variables as
// KEY=VALUE. A variable the manifest alone cannot settle (valueFrom other
// than a Secret's key for a secretEnv field, envFrom) or that names no
// configuration field is an error.
func containerEnviron(c corev1.Container) ([]string, error) {
	var env, errs []string
	// Kubernetes expands $(NAME) of variables defined before: the pod's
	// IP (downward API) gets a stand-in address.
	standIns := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			standIns[e.Name] = "10.0.0.7"
			continue
		}
		if !strings.HasPrefix(e.Name, config.EnvPrefix) {
			continue
		}
		for n, v := range standIns {
			e.Value = strings.ReplaceAll(e.Value, "$("+n+")", v)
		}
		if standIn, ok := secretEnv[e.Name]; ok && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env = append(env, e.Name+"="+standIn)
			continue
		}
		if e.ValueFrom != nil {
			errs = append(errs, fmt.Sprintf("env %s: valueFrom cannot be checked against the configuration; give a value", e.Name))
			continue
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if len(c.EnvFrom) > 0 {
		errs = append(errs, "envFrom cannot be checked against the configuration; list CODEINTERP_* variables in env")
	}
	for _, n := range config.UnknownEnv(env) {
		errs = append(errs, fmt.Sprintf("env %s matches no configuration field", n))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("container %s: %s", c.Name, strings.Join(errs, "; "))
	}
	return env, nil
}

func portOf(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(p)
	return int32(n), err
}

// containerPort resolves a named or numbered target port on a container.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// checkOptions are what a rendering leaves out on purpose (chart values).
type checkOptions struct {
	provider string
	// noAutoscaling: no HorizontalPodAutoscaler; the Deployment's
	// replicas are fixed.
	noAutoscaling bool
	// noNetworkPolicy: the operator guards the ports some other way.
	noNetworkPolicy bool
}

// checkManifests checks the cross references and the pairing with the
// server configuration, whose sandbox provider must be provider, of a
// complete rendering. Every finding is returned.
func checkManifests(m *manifests, provider string) error {
	return checkManifestsWith(m, checkOptions{provider: provider})
}

func checkManifestsWith(m *manifests, opts checkOptions) error {
	provider := opts.provider
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	d := named("Deployment", "codeinterp", m.deployments, fail)
	svc := named("Service", "codeinterp", m.services, fail)
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	if opts.noAutoscaling {
		if len(m.hpas) != 0 {
			fail("autoscaling is off, but %d HorizontalPodAutoscalers are defined", len(m.hpas))
		}
		if d != nil && (d.Spec.Replicas == nil || *d.Spec.Replicas < 1) {
			fail("Deployment %s: autoscaling is off, want replicas >= 1", d.Name)
		}
	} else {
		hpa = one("HorizontalPodAutoscaler", m.hpas, fail)
		if hpa == nil {
			return errors.Join(errs...)
		}
		// The HPA owns the replica count: a replicas field would reset it
		// on every upgrade.
		if d != nil && d.Spec.Replicas != nil {
			fail("Deployment %s sets replicas beside a HorizontalPodAutoscaler: every upgrade would reset the scale", d.Name)
		}
	}
	pol := one("EnvoyExtensionPolicy", m.extPolicies, fail)
	gw := one("Gateway", m.gateways, fail)
	ctp := one("ClientTrafficPolicy", m.clientPolicies, fail)
	if d == nil || svc == nil || pol == nil || gw == nil || ctp == nil {
		return errors.Join(errs...)
	}
	ns := d.Namespace
	// The Gateway and its ClientTrafficPolicy are the release's, or the
	// platform team's in their own namespace (gateway.create false):
	// checked against the routes' parentRefs below.
	namespaced := []metav1.Object{svc, pol}
	if hpa != nil {
		namespaced = append(namespaced, hpa)
	}
	for _, r := range m.routes {
		namespaced = append(namespaced, r)
	}
	for _, o := range m.deployments {
		namespaced = append(namespaced, o)
	}
	for _, o := range m.services {
		namespaced = append(namespaced, o)
	}
	for _, o := range namespaced {
		if o.GetNamespace() != ns {
			fail("%s is in namespace %q, not %q with the Deployment", o.GetName(), o.GetNamespace(), ns)
		}
	}
	// The namespace is the release's (helm install -n NS --create-namespace).
	if ns == "" {
		fail("Deployment %s has no namespace", d.Name)
	}

	// Deployment ↔ Service ↔ HPA ↔ PDB.
	pod := d.Spec.Template
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
		fail("Deployment %s: selector %v does not match its pod labels %v (%v)", d.Name, d.Spec.Selector, pod.Labels, err)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		fail("Service %s: selector %v does not select the Deployment's pods %v", svc.Name, svc.Spec.Selector, pod.Labels)
	}
	for _, pdb := range m.pdbs {
		ps, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || ps.Empty() || !ps.Matches(labels.Set(pod.Labels)) {
			fail("PodDisruptionBudget %s does not select the Deployment's pods", pdb.Name)
		}
	}
	if len(pod.Spec.Containers) != 1 {
		fail("Deployment %s: want one container", d.Name)
		return errors.Join(errs...)
	}
	ctr := pod.Spec.Containers[0]
	var hpaMetrics []autoscalingv2.MetricSpec
	if hpa != nil {
		ref := hpa.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != d.Name {
			fail("HorizontalPodAutoscaler %s targets %s %s %s, not the Deployment %s", hpa.Name, ref.APIVersion, ref.Kind, ref.Name, d.Name)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
			fail("HorizontalPodAutoscaler %s: want 2 <= minReplicas <= maxReplicas", hpa.Name)
		}
		hpaMetrics = hpa.Spec.Metrics
	}
	for _, mt := range hpaMetrics {
		if mt.Type == autoscalingv2.ResourceMetricSourceType && mt.Resource != nil {
			if _, ok := ctr.Resources.Requests[mt.Resource.Name]; !ok {
				fail("HorizontalPodAutoscaler scales on %s utilization, but the container requests no %s", mt.Resource.Name, mt.Resource.Name)
			}
		}
	}

	// The server configuration in the ConfigMap.
	cfg, _, err := serverConfig(m, d)
	if err != nil {
		fail("%v", err)
		return errors.Join(errs...)
	}
	if cfg.Sandbox.Provider != provider {
		fail("sandbox.provider is %s; this manifest is the %s variant", cfg.Sandbox.Provider, provider)
		return errors.Join(errs...)
	}
	checkCluster(m, d, gw, cfg, !opts.noNetworkPolicy, fail)
	grpcPort, err := portOf(cfg.Server.Listen)
	if err != nil {
		fail("server.listen: %v", err)
	}
	if host, _, _ := net.SplitHostPort(cfg.Server.Listen); host != "" && host != "0.0.0.0" && host != "::" {
		fail("server.listen %s must bind all interfaces in a pod", cfg.Server.Listen)
	}
	if _, ok := containerPort(ctr, intstr.FromInt32(grpcPort)); !ok {
		fail("server.listen port %d is not a container port", grpcPort)
	}
	adminPort, err := portOf(cfg.Server.AdminListen)
	if err != nil {
		fail("server.admin_listen: %v", err)
	}

	// Probes reach real endpoints of the server.
	for name, p := range map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		switch {
		case p == nil:
			fail("container %s: no %s probe", ctr.Name, name)
		case p.GRPC != nil:
			if p.GRPC.Port != grpcPort {
				fail("%s probe: gRPC port %d is not server.listen's %d", name, p.GRPC.Port, grpcPort)
			}
		case p.HTTPGet != nil:
			if port, ok := containerPort(ctr, p.HTTPGet.Port); !ok || port != adminPort {
				fail("%s probe: port %v is not server.admin_listen's %d", name, p.HTTPGet.Port.String(), adminPort)
			}
			if p.HTTPGet.Path != "/healthz" && p.HTTPGet.Path != "/readyz" {
				fail("%s probe: path %s is not a health endpoint", name, p.HTTPGet.Path)
			}
		default:
			fail("%s probe: want gRPC or HTTP", name)
		}
	}

	// Graceful drain fits in the termination grace period.
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.Server.ShutdownTimeout {
		fail("terminationGracePeriodSeconds must exceed server.shutdown_timeout %s", cfg.Server.ShutdownTimeout)
	}

	// Memory: every session at its maximum, and the warm interpreters
	// waiting beside them (the pool keeps warm_workers started on top of
	// max_sessions open sessions), must fit in the pod's limit, or the
	// kernel kills the server instead of a worker.
	lim := cfg.Sandbox.Limits
	warm, ok := warmResident[cfg.Sandbox.Provider]
	if !ok {
		fail("no warm-interpreter size known for provider %s", cfg.Sandbox.Provider)
	}
	worst := int64(cfg.Sandbox.MaxSessions)*int64(lim.MaxGuestMemory+lim.WorkerOverhead) +
		int64(cfg.Sandbox.WarmWorkers)*warm + serverHeadroom
	if mem, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok || mem.Value() < worst {
		fail("memory limit %v < max_sessions x (max_guest_memory + worker_overhead) + warm_workers x %s + 256MiB = %d bytes",
			ctr.Resources.Limits.Memory(), config.ByteSize(warm), worst)
	}
	if cfg.Interceptor.MaxMemoryLimit > lim.MaxGuestMemory {
		fail("interceptor.max_memory_limit exceeds sandbox.limits.max_guest_memory")
	}
	if cfg.Sandbox.Isolation.Cgroup == "off" {
		fail("sandbox.isolation.cgroup must not be off in a deployment")
	}

	checkImage(ctr, cfg.Sandbox.Provider, fail)
	switch cfg.Sandbox.Provider {
	case config.ProviderWASM:
		checkWASMPod(m, pod.Spec, ctr, cfg, fail)
	case config.ProviderGVisor:
		checkGVisorPod(m, pod.Spec, ctr, cfg, worst, fail)
	}

	// Gateway ↔ routes ↔ policy ↔ Service.
	if !slices.ContainsFunc(m.gatewayClasses, func(g *gwapiv1.GatewayClass) bool { return string(g.Name) == string(gw.Spec.GatewayClassName) }) {
		fail("Gateway %s: GatewayClass %s is not defined", gw.Name, gw.Spec.GatewayClassName)
	}
	if ctp.Namespace != gw.Namespace {
		fail("ClientTrafficPolicy %s is in namespace %q, not the Gateway's %q", ctp.Name, ctp.Namespace, gw.Namespace)
	}
	routes := map[string]*gwapiv1.HTTPRoute{}
	for _, r := range m.routes {
		routes[r.Name] = r
		if len(r.Spec.ParentRefs) == 0 {
			fail("HTTPRoute %s: no parentRefs", r.Name)
		}
		for _, p := range r.Spec.ParentRefs {
			pns := r.Namespace
			if p.Namespace != nil {
				pns = string(*p.Namespace)
			}
			if string(p.Name) != gw.Name || pns != gw.Namespace || (p.Kind != nil && *p.Kind != "Gateway") {
				fail("HTTPRoute %s: parentRef %s/%s is not the Gateway %s/%s", r.Name, pns, p.Name, gw.Namespace, gw.Name)
			}
			if p.SectionName != nil && !slices.ContainsFunc(gw.Spec.Listeners, func(l gwapiv1.Listener) bool { return l.Name == *p.SectionName }) {
				fail("HTTPRoute %s: parentRef sectionName %s is not a listener of the Gateway %s", r.Name, *p.SectionName, gw.Name)
			}
		}
	}
	var policyRoutes []*gwapiv1.HTTPRoute
	if len(pol.Spec.TargetRefs) == 0 {
		fail("EnvoyExtensionPolicy %s: no targetRefs", pol.Name)
	}
	for _, tr := range pol.Spec.TargetRefs {
		if tr.Group != gwapiv1.GroupName || tr.Kind != "HTTPRoute" {
			fail("EnvoyExtensionPolicy %s: targets %s/%s; want an HTTPRoute so other routes stay untouched", pol.Name, tr.Group, tr.Kind)
			continue
		}
		r := routes[string(tr.Name)]
		if r == nil {
			fail("EnvoyExtensionPolicy %s: target HTTPRoute %s is not defined", pol.Name, tr.Name)
			continue
		}
		policyRoutes = append(policyRoutes, r)
	}
	// The policy's routes match exactly the server's paths (Exact), and the
	// other routes do not reach the filter.
	var matched []string
	for _, r := range policyRoutes {
		for _, rule := range r.Spec.Rules {
			for _, mt := range rule.Matches {
				if mt.Path == nil || mt.Path.Type == nil || *mt.Path.Type != gwapiv1.PathMatchExact || mt.Path.Value == nil {
					fail("HTTPRoute %s: the policy's route must match paths Exactly", r.Name)
					continue
				}
				matched = append(matched, *mt.Path.Value)
			}
		}
	}
	slices.Sort(matched)
	want := append(slices.Clone(cfg.Routes.Paths), cfg.Routes.MessagesPaths...)
	slices.Sort(want)
	if !slices.Equal(matched, want) {
		fail("the policy's HTTPRoutes match %v; the server handles routes.paths and messages_paths %v", matched, want)
	}

	if len(pol.Spec.ExtProc) != 1 {
		fail("EnvoyExtensionPolicy %s: want one extProc, found %d", pol.Name, len(pol.Spec.ExtProc))
		return errors.Join(errs...)
	}
	ep := pol.Spec.ExtProc[0]
	if len(ep.BackendRefs) != 1 {
		fail("extProc: want one backendRef")
	} else {
		br := ep.BackendRefs[0].BackendObjectReference
		if (br.Kind != nil && *br.Kind != "Service") || string(br.Name) != svc.Name || br.Port == nil {
			fail("extProc backendRef %v does not name the Service %s with a port", br, svc.Name)
		} else {
			found := false
			for _, sp := range svc.Spec.Ports {
				if sp.Port != *br.Port {
					continue
				}
				found = true
				if cp, ok := containerPort(ctr, sp.TargetPort); !ok || cp != grpcPort {
					fail("Service port %d targets %v, not server.listen's port %d", sp.Port, sp.TargetPort.String(), grpcPort)
				}
				if sp.AppProtocol == nil || *sp.AppProtocol != "kubernetes.io/h2c" {
					fail("Service port %d: appProtocol must be kubernetes.io/h2c (gRPC)", sp.Port)
				}
			}
			if !found {
				fail("extProc backendRef port %d is not a port of Service %s", *br.Port, svc.Name)
			}
		}
	}
	if ep.FailOpen == nil || *ep.FailOpen {
		fail("extProc: failOpen must be false")
	}
	pmode := ep.ProcessingMode
	if pmode == nil || !pmode.AllowModeOverride {
		fail("extProc: processingMode.allowModeOverride must be true")
	}
	for dir, o := range map[string]*egv1a1.ProcessingModeOptions{"request": pmode.Request, "response": pmode.Response} {
		if o == nil || o.Body == nil || *o.Body != egv1a1.BufferedExtProcBodyProcessingMode {
			fail("extProc: processingMode.%s.body must be Buffered", dir)
		}
	}
	// No max_message_timeout in Envoy Gateway: messageTimeout alone must
	// cover a round, and the server must not rely on overrides.
	var mt time.Duration
	if ep.MessageTimeout == nil {
		fail("extProc: messageTimeout unset (Envoy's default is 200ms)")
	} else if mt, err = time.ParseDuration(string(*ep.MessageTimeout)); err != nil {
		fail("extProc: messageTimeout %q: %v", *ep.MessageTimeout, err)
	}
	if round := lim.RunTimeout + cfg.Upstream.Timeout; mt < round || mt > time.Hour {
		fail("extProc: messageTimeout %s must cover one round (run_timeout + upstream.timeout = %s) and be <= 1h", mt, round)
	}
	if cfg.Server.OverrideMessageTimeout != 0 {
		fail("server.override_message_timeout must be 0: Envoy Gateway leaves max_message_timeout at 0, so Envoy ignores overrides")
	}

	// Listener settings for the buffered exchange.
	targetsGateway := slices.ContainsFunc(ctp.Spec.TargetRefs, func(tr gwapiv1.LocalPolicyTargetReferenceWithSectionName) bool {
		return tr.Group == gwapiv1.GroupName && tr.Kind == "Gateway" && string(tr.Name) == gw.Name
	})
	if !targetsGateway {
		fail("ClientTrafficPolicy %s does not target the Gateway %s", ctp.Name, gw.Name)
	}
	if ctp.Spec.Connection == nil || ctp.Spec.Connection.BufferLimit == nil || ctp.Spec.Connection.BufferLimit.Value() < int64(cfg.Server.MaxBodyBytes) {
		fail("ClientTrafficPolicy: connection.bufferLimit must be >= server.max_body_bytes %s", cfg.Server.MaxBodyBytes)
	}
	var idle time.Duration
	if t := ctp.Spec.Timeout; t != nil && t.HTTP != nil && t.HTTP.StreamIdleTimeout != nil {
		idle, _ = time.ParseDuration(string(*t.HTTP.StreamIdleTimeout))
	}
	if idle < mt {
		fail("ClientTrafficPolicy: timeout.http.streamIdleTimeout %s must outlast the extProc messageTimeout %s", idle, mt)
	}

	// Replicas: the HPA's range, else the Deployment's count.
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if hpa != nil {
		replicas = hpa.Spec.MaxReplicas
	}
	checkAPIManifests(m, d, replicas, svc, ctr, cfg, pol, fail)

	checkModel(m, svc, cfg, fail)
	return errors.Join(errs...)
}

// checkModel: the routes that do not go to codeinterp go to the model —
// a Service (across namespaces only with a ReferenceGrant there) or an
// Envoy Gateway Backend for a host outside the cluster (a DNS name sent
// as Host) — and the server's follow-ups go straight to that same model,
// never back through the Gateway (whose route would run the filter again).
func checkModel(m *manifests, svc *corev1.Service, cfg *config.Config, fail func(string, ...any)) {
	type target struct{ host, port, scheme string }
	var targets []target
	for _, r := range m.routes {
		for _, rule := range r.Spec.Rules {
			var rewrite string
			for _, f := range rule.Filters {
				if f.Type == gwapiv1.HTTPRouteFilterURLRewrite && f.URLRewrite != nil && f.URLRewrite.Hostname != nil {
					rewrite = string(*f.URLRewrite.Hostname)
				}
			}
			for _, br := range rule.BackendRefs {
				kind := "Service"
				if br.Kind != nil {
					kind = string(*br.Kind)
				}
				ns := r.Namespace
				if br.Namespace != nil {
					ns = string(*br.Namespace)
				}
				switch {
				case kind == "Service" && string(br.Name) == svc.Name && ns == svc.Namespace:
					// codeinterp's own API
				case kind == "Service":
					if br.Port == nil {
						fail("HTTPRoute %s: backendRef %s has no port", r.Name, br.Name)
						continue
					}
					if ns != r.Namespace && !referenceGranted(m, r.Namespace, ns, string(br.Name)) {
						fail("HTTPRoute %s: the Service %s/%s is in another namespace and no ReferenceGrant there lets HTTPRoutes from %s name it",
							r.Name, ns, br.Name, r.Namespace)
					}
					targets = append(targets, target{fmt.Sprintf("%s.%s.svc.cluster.local", br.Name, ns), fmt.Sprint(*br.Port), "http"})
				case kind == "Backend" && br.Group != nil && string(*br.Group) == egv1a1.GroupName:
					be := named("Backend", string(br.Name), m.backends, fail)
					if be == nil {
						continue
					}
					if be.Namespace != ns {
						fail("Backend %s is in namespace %q; the HTTPRoute %s names it in %q", be.Name, be.Namespace, r.Name, ns)
					}
					scheme := "http"
					if be.Spec.TLS != nil {
						scheme = "https"
					}
					for _, ep := range be.Spec.Endpoints {
						switch {
						case ep.FQDN != nil:
							targets = append(targets, target{ep.FQDN.Hostname, fmt.Sprint(ep.FQDN.Port), scheme})
							if rewrite != ep.FQDN.Hostname {
								fail("HTTPRoute %s: the rule to Backend %s rewrites Host to %q, not its host %s", r.Name, be.Name, rewrite, ep.FQDN.Hostname)
							}
						case ep.IP != nil:
							targets = append(targets, target{ep.IP.Address, fmt.Sprint(ep.IP.Port), scheme})
							if scheme == "https" {
								fail("Backend %s: TLS to an IP address (%s) has no name to check the certificate against", be.Name, ep.IP.Address)
							}
						default:
							fail("Backend %s: want FQDN or IP endpoints", be.Name)
						}
					}
				default:
					fail("HTTPRoute %s: backendRef %v is neither a Service nor an Envoy Gateway Backend", r.Name, br.BackendObjectReference)
				}
			}
		}
	}
	if len(targets) == 0 {
		fail("no HTTPRoute sends requests to the model")
		return
	}
	u, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		fail("upstream.url: %v", err)
		return
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	for _, tg := range targets {
		if tg.host != u.Hostname() || tg.port != port || tg.scheme != u.Scheme {
			fail("upstream.url %s: the routes send the model's requests to %s://%s:%s; follow-ups must go straight to the same model",
				cfg.Upstream.URL, tg.scheme, tg.host, tg.port)
		}
	}
}

// referenceGranted: a ReferenceGrant in namespace to lets HTTPRoutes from
// namespace from name the Service name.
func referenceGranted(m *manifests, from, to, name string) bool {
	for _, g := range m.refGrants {
		if g.Namespace != to {
			continue
		}
		okFrom := slices.ContainsFunc(g.Spec.From, func(f gwapiv1b1.ReferenceGrantFrom) bool {
			return f.Group == gwapiv1.GroupName && f.Kind == "HTTPRoute" && string(f.Namespace) == from
		})
		okTo := slices.ContainsFunc(g.Spec.To, func(t gwapiv1b1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == "Service" && (t.Name == nil || *t.Name == "" || string(*t.Name) == name)
		})
		if okFrom && okTo {
			return true
		}
	}
	return false
}

// checkAPIManifests: the API listener is a container port and a Service
// port; an HTTPRoute outside the extension policy sends /v1/containers (and
// /v1/files unless files.source is upstream) there; the store is shared by
// the replicas and, when it is redis.yaml's Redis, that Redis is complete.
func checkAPIManifests(m *manifests, d *appsv1.Deployment, replicas int32, svc *corev1.Service, ctr corev1.Container, cfg *config.Config,
	pol *egv1a1.EnvoyExtensionPolicy, fail func(string, ...any)) {
	if cfg.API.Listen == "" {
		fail("api.listen is empty: the Containers and Files API would not be served")
		return
	}
	apiPort, err := portOf(cfg.API.Listen)
	if err != nil {
		fail("api.listen: %v", err)
		return
	}
	if host, _, _ := net.SplitHostPort(cfg.API.Listen); host != "" && host != "0.0.0.0" && host != "::" {
		fail("api.listen %s must bind all interfaces in a pod", cfg.API.Listen)
	}
	if _, ok := containerPort(ctr, intstr.FromInt32(apiPort)); !ok {
		fail("api.listen port %d is not a container port", apiPort)
	}
	// Service ports whose target is the API listener.
	svcPorts := map[int32]bool{}
	for _, sp := range svc.Spec.Ports {
		if cp, ok := containerPort(ctr, sp.TargetPort); ok && cp == apiPort {
			svcPorts[sp.Port] = true
		}
	}
	if len(svcPorts) == 0 {
		fail("Service %s has no port targeting api.listen's port %d", svc.Name, apiPort)
	}
	policyTargets := map[string]bool{}
	for _, tr := range pol.Spec.TargetRefs {
		policyTargets[string(tr.Name)] = true
	}
	want := []string{"/v1/containers", "/v1/responses/", "/v1/conversations", "/v1/skills", "/v1/organization/usage/code_interpreter_sessions"}
	if cfg.Files.Source != config.FilesUpstream {
		want = append(want, "/v1/files")
	}
	routed := map[string]bool{}
	for _, r := range m.routes {
		for _, rule := range r.Spec.Rules {
			toAPI := false
			for _, br := range rule.BackendRefs {
				if (br.Kind == nil || *br.Kind == "Service") && string(br.Name) == svc.Name && br.Port != nil && svcPorts[int32(*br.Port)] {
					toAPI = true
				}
			}
			for _, mt := range rule.Matches {
				if mt.Path == nil || mt.Path.Value == nil {
					continue
				}
				v := *mt.Path.Value
				if !toAPI {
					if slices.Contains(want, v) {
						fail("HTTPRoute %s: %s goes to %v, not the Service %s's API port", r.Name, v, rule.BackendRefs, svc.Name)
					}
					continue
				}
				if mt.Path.Type == nil || *mt.Path.Type != gwapiv1.PathMatchPathPrefix {
					fail("HTTPRoute %s: %s must be a PathPrefix match (the API has sub-paths)", r.Name, v)
				}
				if !slices.Contains(want, v) {
					fail("HTTPRoute %s: %s goes to the API, which does not serve it (files.source %s)", r.Name, v, cfg.Files.Source)
				}
				if policyTargets[r.Name] {
					fail("HTTPRoute %s: the API route is targeted by the extension policy; it must not reach ext_proc", r.Name)
				}
				routed[v] = true
			}
		}
	}
	for _, p := range want {
		if !routed[p] {
			fail("no HTTPRoute sends %s to the Service %s's API port (api.listen %s)", p, svc.Name, cfg.API.Listen)
		}
	}

	// The store: shared when there is more than one replica.
	if cfg.Store.Backend == config.StoreMemory && replicas > 1 {
		fail("store.backend memory with %d replicas: each pod would hold its own containers; use redis", replicas)
	}
	if cfg.Store.Backend != config.StoreRedis {
		return
	}
	u, err := url.Parse(cfg.Store.RedisURL)
	if err != nil {
		fail("store.redis_url: %v", err)
		return
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "6379"
	}
	name, inCluster := strings.CutSuffix(host, "."+d.Namespace+".svc.cluster.local")
	if !inCluster {
		return // the operator's own Redis: nothing here to check against
	}
	rsvc := named("Service", name, m.services, fail)
	if rsvc == nil {
		fail("store.redis_url names the Service %s, which is not defined", name)
		return
	}
	var target *intstr.IntOrString
	for _, sp := range rsvc.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) == port {
			target = &sp.TargetPort
		}
	}
	if target == nil {
		fail("store.redis_url port %s is not a port of Service %s", port, rsvc.Name)
		return
	}
	var rd *appsv1.Deployment
	for _, dep := range m.deployments {
		if labels.SelectorFromSet(rsvc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) && len(rsvc.Spec.Selector) > 0 {
			rd = dep
		}
	}
	if rd == nil || rd == d {
		fail("Service %s does not select a Redis Deployment", rsvc.Name)
		return
	}
	rc := rd.Spec.Template.Spec.Containers
	if len(rc) != 1 || !strings.HasPrefix(rc[0].Image, "redis:") {
		fail("Deployment %s: want one redis:* container", rd.Name)
		return
	}
	if cp, ok := containerPort(rc[0], *target); !ok || cp != 6379 {
		fail("Service %s port %s does not reach redis-server's 6379", rsvc.Name, port)
	}
	if rd.Spec.Replicas == nil || *rd.Spec.Replicas != 1 {
		fail("Deployment %s: want exactly 1 replica (two Redis would split the store)", rd.Name)
	}
	if _, ok := rc[0].Resources.Limits[corev1.ResourceMemory]; !ok {
		fail("Deployment %s: no memory limit", rd.Name)
	}
	args := strings.Join(rc[0].Args, " ")
	if !strings.Contains(args, "--maxmemory-policy noeviction") {
		fail("Deployment %s: want --maxmemory-policy noeviction (evicting keys would lose containers silently)", rd.Name)
	}
	// The shipped Redis has a password, and the replicas give it.
	if !strings.Contains(args, "--requirepass ") {
		fail("Deployment %s: want --requirepass (a Redis anyone can write lets them stop or misplace every run)", rd.Name)
	}
	if pw, ok := u.User.Password(); !ok || pw == "" {
		fail("store.redis_url has no password for the shipped Redis")
	}
}

// Resident size of a warm interpreter (started, nothing run yet): wasm
// about 70MiB (README, Sizing); gVisor about 200MiB for runsc, gofer,
// sentry and Python with numpy, pandas and matplotlib imported
// (measured with runsc 0.0~20221219 on Debian bookworm).
var warmResident = map[string]int64{
	config.ProviderWASM:   70 << 20,
	config.ProviderGVisor: 200 << 20,
}

// serverHeadroom is the server process itself.
const serverHeadroom = 256 << 20

// checkWASMPod: least privilege that still allows cgroup management.
func checkWASMPod(m *manifests, pod corev1.PodSpec, ctr corev1.Container, cfg *config.Config, fail func(string, ...any)) {
	sc := ctr.SecurityContext
	switch {
	case sc == nil:
		fail("container %s: no securityContext", ctr.Name)
	default:
		if sc.Privileged != nil && *sc.Privileged {
			fail("container must not be privileged (see the RuntimeClass comment)")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			fail("allowPrivilegeEscalation must be false")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			fail("readOnlyRootFilesystem must be true")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			fail("capabilities must drop ALL")
		} else {
			add := slices.Clone(sc.Capabilities.Add)
			slices.Sort(add)
			// SYS_ADMIN: each worker's own network and IPC namespaces
			// (clone refuses them without it; image-test runs the image
			// with exactly this list).
			if !slices.Equal(add, []corev1.Capability{"KILL", "SETGID", "SETUID", "SYS_ADMIN"}) {
				fail("capabilities.add = %v, want exactly KILL, SETGID, SETUID, SYS_ADMIN", sc.Capabilities.Add)
			}
		}
	}
	if rc := pod.RuntimeClassName; rc == nil || !slices.ContainsFunc(m.runtimeClasses, func(r *nodev1.RuntimeClass) bool { return r.Name == *rc }) {
		fail("runtimeClassName must name a RuntimeClass defined here (writable cgroupfs)")
	}
	// The image ships the runtime and its precompiled compilation cache
	// (image/Containerfile); the configuration must use them, and no volume
	// may hide the cache (the pod would compile at every start).
	img, err := readImagePaths()
	if err != nil {
		fail("%v", err)
		return
	}
	if d := cfg.Sandbox.RuntimeDir; d != "" && d != img.runtimeDir {
		fail("sandbox.runtime_dir %s is not the image's runtime %s", d, img.runtimeDir)
	}
	if d := cfg.Sandbox.CacheDir; d != "" && d != img.cacheDir {
		fail("sandbox.cache_dir %s is not the image's precompiled cache %s", d, img.cacheDir)
	}
	for _, vm := range ctr.VolumeMounts {
		if m := filepath.Clean(vm.MountPath); m == img.cacheDir || strings.HasPrefix(img.cacheDir, m+"/") {
			fail("volume %s at %s hides the image's precompiled cache %s", vm.Name, vm.MountPath, img.cacheDir)
		}
	}
}

// imagePaths are where the image puts the CPython-WASI runtime and the
// compilation cache: the defaults its environment gives an empty
// sandbox.runtime_dir and cache_dir (config ResolvePaths).
type imagePaths struct{ runtimeDir, cacheDir string }

func readImagePaths() (imagePaths, error) {
	data, err := os.ReadFile("../../image/Containerfile")
	if err != nil {
		return imagePaths{}, err
	}
	var p imagePaths
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "ENV ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "CODEINTERP_RUNTIME_DIR":
				p.runtimeDir = v
			case "XDG_CACHE_HOME":
				p.cacheDir = filepath.Join(v, "codeinterp", "wazero")
			}
		}
	}
	if p.runtimeDir == "" || p.cacheDir == "" {
		return p, errors.New("image/Containerfile sets no ENV CODEINTERP_RUNTIME_DIR and XDG_CACHE_HOME")
	}
	return p, nil
}

// imageRepos are the images `make image` builds, by provider
// (image/build.sh), tagged with the VERSION file.
var imageRepos = map[string]string{
	config.ProviderWASM:   "codeinterp/extproc",
	config.ProviderGVisor: "codeinterp/extproc-gvisor",
}

// checkImage: the server container runs the image `make image` builds for
// its provider, at this VERSION, with the entrypoint's serve command.
func checkImage(ctr corev1.Container, provider string, fail func(string, ...any)) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		fail("%v", err)
		return
	}
	if want := imageRepos[provider] + ":" + strings.TrimSpace(string(v)); ctr.Image != want {
		fail("container %s: image %s, want %s (what make image builds; VERSION)", ctr.Name, ctr.Image, want)
	}
	if len(ctr.Command) > 0 || len(ctr.Args) == 0 || ctr.Args[0] != "serve" {
		fail("container %s: want no command (the image's entrypoint is extproc) and args starting with serve, got %v %v", ctr.Name, ctr.Command, ctr.Args)
	}
}

// runscCapabilities are what runsc needs without privileged mode (see the
// top of codeinterp-gvisor.yaml for the gVisor sources): namespaces,
// mounts and the sandbox's chroot (SYS_ADMIN, SYS_CHROOT), mapping nobody
// into its user namespace (SETUID, SETGID), clearing the bounding set
// (SETPCAP), the gofer's file capabilities, and KILL for the server to
// kill sandbox processes owned by uid 65534. The systrap and ptrace
// platforms add SYS_PTRACE.
var runscCapabilities = []corev1.Capability{
	"SYS_ADMIN", "SYS_CHROOT", "SETUID", "SETGID", "SETPCAP",
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
}

// checkGVisorPod: what runsc and the gVisor provider need from the pod.
func checkGVisorPod(m *manifests, pod corev1.PodSpec, ctr corev1.Container, cfg *config.Config, worst int64, fail func(string, ...any)) {
	g := cfg.Sandbox.GVisor
	sc := ctr.SecurityContext
	if sc == nil {
		fail("container %s: no securityContext (runsc needs root and privileges)", ctr.Name)
		return
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) {
		fail("runsc needs root: runAsUser must be 0 and runAsNonRoot not true")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fail("readOnlyRootFilesystem must be true")
	}
	if sc.Privileged != nil && *sc.Privileged {
		// The API server's own rule.
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			fail("allowPrivilegeEscalation cannot be false with privileged: true")
		}
	} else {
		// The smaller set: every capability runsc uses, no seccomp or
		// AppArmor profile in its way, an unmasked /proc, and a writable
		// cgroup v2 (the RuntimeClass of codeinterp.yaml).
		need := slices.Clone(runscCapabilities)
		if g.Platform == "ptrace" || g.Platform == "systrap" {
			need = append(need, "SYS_PTRACE")
		}
		var have []corev1.Capability
		if sc.Capabilities != nil {
			have = sc.Capabilities.Add
		}
		var missing []string
		for _, c := range need {
			if !slices.Contains(have, c) {
				missing = append(missing, string(c))
			}
		}
		if len(missing) > 0 {
			fail("runsc needs privileged: true, or capabilities.add with %v: missing capabilities %v", need, missing)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined {
			fail("without privileged, seccompProfile must be Unconfined: the runtime's default blocks runsc's namespace set-up")
		}
		if sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			fail("without privileged, appArmorProfile must be Unconfined: the runtime's default denies mount")
		}
		if sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
			fail("without privileged, procMount must be Unmasked: the sandbox mounts a fresh /proc")
		}
		if rc := pod.RuntimeClassName; rc == nil || !slices.ContainsFunc(m.runtimeClasses, func(r *nodev1.RuntimeClass) bool { return r.Name == *rc }) {
			fail("without privileged, runtimeClassName must name a RuntimeClass defined here (writable cgroupfs)")
		}
		if cfg.Sandbox.Isolation.Cgroup != "v2" {
			fail("without privileged, sandbox.isolation.cgroup must be v2 (the writable-cgroup RuntimeClass is v2 only)")
		}
	}
	// A privileged container has no cgroup namespace (containerd), so the
	// sandboxes' groups are charged at the node's root, not to the pod: the
	// request must reserve them on the node.
	if mem, ok := ctr.Resources.Requests[corev1.ResourceMemory]; !ok || mem.Value() < worst {
		fail("memory request %v < the sandboxes' worst case %d bytes (privileged: they are charged outside the pod)", ctr.Resources.Requests.Memory(), worst)
	}
	// Writable emptyDir volumes, by mount path.
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	writableEmptyDir := func(vm corev1.VolumeMount) bool { return emptyDirs[vm.Name] && !vm.ReadOnly }
	// The provider makes state_dir and removes it when it stops: it must
	// be strictly below a writable emptyDir (the root filesystem is
	// read-only; a mount point cannot be removed).
	switch sd := g.StateDir; {
	case sd == "":
		fail("sandbox.gvisor.state_dir must be set to a directory on a writable emptyDir volume")
	case slices.ContainsFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool { return filepath.Clean(vm.MountPath) == filepath.Clean(sd) }):
		fail("sandbox.gvisor.state_dir %s must be below a volume's mount point, not at it (the provider removes it)", sd)
	case !slices.ContainsFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return writableEmptyDir(vm) && strings.HasPrefix(filepath.Clean(sd), filepath.Clean(vm.MountPath)+"/")
	}):
		fail("sandbox.gvisor.state_dir %s is not below a writable emptyDir volume mount", sd)
	}
	if !slices.ContainsFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/tmp" && writableEmptyDir(vm) }) {
		fail("/tmp is not a writable emptyDir volume (the root filesystem is read-only)")
	}
	// The sandbox sees only the image's /usr (and a few files in /etc).
	if !strings.HasPrefix(g.Python, "/usr/") {
		fail("sandbox.gvisor.python %s must be under /usr, the only tree the sandbox sees", g.Python)
	}
}

func TestGatewayManifests(t *testing.T) {
	for _, provider := range providers() {
		t.Run(provider, func(t *testing.T) {
			m, err := loadManifests(readGatewayFiles(t, provider))
			if err != nil {
				t.Fatalf("manifests do not decode:\n%v", err)
			}
			if f := serverManifests[provider]; m.documentsByFile[f] == 0 {
				t.Errorf("%s: no documents decoded", f)
			}
			if err := checkManifests(m, provider); err != nil {
				t.Fatalf("manifests are inconsistent:\n%v", err)
			}
			// What `kubectl apply` would hand Envoy Gateway's controller.
			checkTranslated(t, readGatewayFiles(t, provider)[serverManifests[provider]], nil, m)
		})
	}
}

// The two server manifests are alternatives: the same objects, so either
// pairs with the shared extension policy and replaces the other.
func TestGatewayServerManifestsInterchangeable(t *testing.T) {
	names := func(provider string) []string {
		m, err := loadManifests(map[string][]byte{serverManifests[provider]: readGatewayFiles(t, provider)[serverManifests[provider]]})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range m.configMaps {
			out = append(out, "ConfigMap/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range m.deployments {
			out = append(out, "Deployment/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range m.services {
			out = append(out, "Service/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range m.hpas {
			out = append(out, "HorizontalPodAutoscaler/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range m.pdbs {
			out = append(out, "PodDisruptionBudget/"+o.Namespace+"/"+o.Name)
		}
		return out
	}
	want := names(config.ProviderWASM)
	for _, p := range providers() {
		if got := names(p); !slices.Equal(got, want) {
			t.Errorf("%s defines %v; %s defines %v", serverManifests[p], got, serverManifests[config.ProviderWASM], want)
		}
	}
}

// server returns the codeinterp Deployment and Service of a rendering.
func server(m *manifests) struct {
	d   *appsv1.Deployment
	svc *corev1.Service
} {
	must := func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
	return struct {
		d   *appsv1.Deployment
		svc *corev1.Service
	}{named("Deployment", "codeinterp", m.deployments, must), named("Service", "codeinterp", m.services, must)}
}

func route(m *manifests, name string) *gwapiv1.HTTPRoute {
	for _, r := range m.routes {
		if r.Name == name {
			return r
		}
	}
	panic("no HTTPRoute " + name)
}

// Manifests the API server would reject, or that would not fit together,
// must fail.
func TestGatewayManifestsBroken(t *testing.T) {
	textCases := []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "codeinterp.yaml", "    failOpen: false", "    failOpen: false\n    failClosed: true", `unknown field "failClosed"`},
		{"misspelt field", "codeinterp.yaml", "  minReplicas: 2", "  minReplica: 2", `unknown field "minReplica"`},
		{"wrong type", "codeinterp.yaml", "  replicas: 1", "  replicas: one", "replicas"},
		{"duplicate field", "codeinterp.yaml", "  gatewayClassName: eg", "  gatewayClassName: eg\n  gatewayClassName: eg", "already set"},
		{"bad quantity", "codeinterp.yaml", "memory: 6Gi\n          limits", "memory: 6 gigs\n          limits", "quantities must match"},
		{"unknown kind", "codeinterp.yaml", "kind: GatewayClass", "kind: GatewayKlass", "no Go type known"},
		{"strict ConfigMap config", "codeinterp.yaml", "      max_sessions: 8", "      max_session: 8", `sandbox.max_session: unknown field`},
		{"memory store with replicas", "codeinterp.yaml", "      backend: redis", "      backend: memory", "store.backend memory with 20 replicas"},
		{"API on loopback", "codeinterp.yaml", "      listen: :8081", `      listen: "127.0.0.1:8081"`, "api.listen 127.0.0.1:8081 must bind all interfaces"},
		{"Redis URL port", "codeinterp.yaml", "@codeinterp-redis.codeinterp.svc.cluster.local:6379/0", "@codeinterp-redis.codeinterp.svc.cluster.local:6380/0", "port 6380 is not a port of Service codeinterp-redis"},
		{"Redis without its password", "codeinterp.yaml", "redis://:$(REDIS_PASSWORD)@codeinterp-redis", "redis://codeinterp-redis", "store.redis_url has no password"},
		{"Redis without requirepass", "codeinterp.yaml", "        - --requirepass\n        - $(REDIS_PASSWORD)\n", "", "want --requirepass"},
		{"Redis image", "codeinterp.yaml", "image: redis:7", "image: valkey/valkey:8", "want one redis:* container"},
		{"image tag", "codeinterp.yaml", "image: codeinterp/extproc:0.1.0", "image: codeinterp/extproc:latest", "want codeinterp/extproc:0.1.0"},
		{"cache_dir elsewhere", "codeinterp.yaml", "cache_dir: /var/cache/codeinterp/wazero", "cache_dir: /tmp/wazero", "is not the image's precompiled cache"},
		{"volume hides the cache", "codeinterp.yaml", "          mountPath: /var/lib/codeinterp/checkpoints\n      volumes:\n",
			"          mountPath: /var/lib/codeinterp/checkpoints\n        - name: cache\n          mountPath: /var/cache/codeinterp\n      volumes:\n      - name: cache\n        emptyDir: {}\n",
			"volume cache at /var/cache/codeinterp hides the image's precompiled cache"},
		{"command replaces the entrypoint", "codeinterp.yaml", `        args: ["serve",`, `        command: ["/extproc"]` + "\n" + `        args: ["serve",`, "want no command"},
	}
	for _, tt := range textCases {
		t.Run(tt.name, func(t *testing.T) {
			files := readGatewayFiles(t, config.ProviderWASM)
			data := string(files[tt.file])
			if strings.Count(data, tt.old) != 1 {
				t.Fatalf("%s no longer contains %q exactly once; update the test", tt.file, tt.old)
			}
			files[tt.file] = []byte(strings.Replace(data, tt.old, tt.new, 1))
			m, err := loadManifests(files)
			if err == nil {
				err = checkManifests(m, config.ProviderWASM)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}

	cases := []struct {
		name   string
		mutate func(*manifests)
		want   string
	}{
		{"policy targets a missing route", func(m *manifests) { m.extPolicies[0].Spec.TargetRefs[0].Name = "nope" }, "target HTTPRoute nope is not defined"},
		{"policy targets the Gateway", func(m *manifests) {
			m.extPolicies[0].Spec.TargetRefs[0].Kind = "Gateway"
			m.extPolicies[0].Spec.TargetRefs[0].Name = "llm"
		}, "want an HTTPRoute so other routes stay untouched"},
		{"backendRef names another Service", func(m *manifests) { m.extPolicies[0].Spec.ExtProc[0].BackendRefs[0].Name = "other" }, "does not name the Service codeinterp"},
		{"backendRef port missing on the Service", func(m *manifests) {
			p := gwapiv1.PortNumber(50052)
			m.extPolicies[0].Spec.ExtProc[0].BackendRefs[0].Port = &p
		}, "port 50052 is not a port of Service"},
		{"streamed body", func(m *manifests) {
			s := egv1a1.StreamedExtProcBodyProcessingMode
			m.extPolicies[0].Spec.ExtProc[0].ProcessingMode.Response.Body = &s
		}, "processingMode.response.body must be Buffered"},
		{"no mode override", func(m *manifests) { m.extPolicies[0].Spec.ExtProc[0].ProcessingMode.AllowModeOverride = false }, "allowModeOverride must be true"},
		{"fail open", func(m *manifests) { f := true; m.extPolicies[0].Spec.ExtProc[0].FailOpen = &f }, "failOpen must be false"},
		{"short message timeout", func(m *manifests) {
			d := gwapiv1.Duration("10s")
			m.extPolicies[0].Spec.ExtProc[0].MessageTimeout = &d
		}, "messageTimeout 10s must cover one round"},
		{"Service selects other pods", func(m *manifests) { server(m).svc.Spec.Selector = map[string]string{"app": "x"} }, "does not select the Deployment's pods"},
		{"Deployment selector mismatch", func(m *manifests) {
			server(m).d.Spec.Selector.MatchLabels = map[string]string{"app": "x"}
		}, "does not match its pod labels"},
		{"HPA targets another Deployment", func(m *manifests) { m.hpas[0].Spec.ScaleTargetRef.Name = "other" }, "not the Deployment codeinterp"},
		{"HPA on CPU without requests", func(m *manifests) {
			delete(server(m).d.Spec.Template.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)
		}, "requests no cpu"},
		{"Service targets the admin port", func(m *manifests) { server(m).svc.Spec.Ports[0].TargetPort = intstr.FromString("admin") }, "not server.listen's port 50051"},
		{"memory limit too small", func(m *manifests) {
			server(m).d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = qty("2Gi")
		}, "memory limit 2Gi <"},
		{"privileged", func(m *manifests) {
			p := true
			server(m).d.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = &p
		}, "must not be privileged"},
		{"extra capability", func(m *manifests) {
			sc := server(m).d.Spec.Template.Spec.Containers[0].SecurityContext
			sc.Capabilities.Add = append(sc.Capabilities.Add, "NET_ADMIN")
		}, "want exactly KILL, SETGID, SETUID, SYS_ADMIN"},
		{"missing SYS_ADMIN", func(m *manifests) {
			sc := server(m).d.Spec.Template.Spec.Containers[0].SecurityContext
			sc.Capabilities.Add = slices.DeleteFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c == "SYS_ADMIN" })
		}, "want exactly KILL, SETGID, SETUID, SYS_ADMIN"},
		{"missing RuntimeClass", func(m *manifests) { m.runtimeClasses = nil }, "runtimeClassName must name a RuntimeClass"},
		{"ConfigMap missing", func(m *manifests) { m.configMaps = nil }, "references ConfigMap codeinterp-config, which is not defined"},
		{"grace period shorter than the drain", func(m *manifests) {
			g := int64(30)
			server(m).d.Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}, "terminationGracePeriodSeconds must exceed server.shutdown_timeout 2m0s"},
		{"probe on the wrong port", func(m *manifests) {
			server(m).d.Spec.Template.Spec.Containers[0].ReadinessProbe.GRPC.Port = 9090
		}, "readiness probe: gRPC port 9090"},
		{"buffer limit too small", func(m *manifests) { q := qty("1Mi"); m.clientPolicies[0].Spec.Connection.BufferLimit = &q }, "connection.bufferLimit must be >= server.max_body_bytes"},
		{"idle timeout shorter than the loop", func(m *manifests) {
			d := gwapiv1.Duration("300s")
			m.clientPolicies[0].Spec.Timeout.HTTP.StreamIdleTimeout = &d
		}, "streamIdleTimeout 5m0s must outlast"},
		{"policy route with a prefix match", func(m *manifests) {
			pt := gwapiv1.PathMatchPathPrefix
			route(m, "codeinterp-responses").Spec.Rules[0].Matches[0].Path.Type = &pt
		}, "must match paths Exactly"},
		{"policy route on another path", func(m *manifests) {
			v := "/v1/chat/completions"
			route(m, "codeinterp-responses").Spec.Rules[0].Matches[0].Path.Value = &v
		}, "the policy's HTTPRoutes match [/v1/chat/completions /v1/messages]; the server handles routes.paths and messages_paths [/v1/messages /v1/responses]"},
		{"route on another Gateway", func(m *manifests) { m.routes[0].Spec.ParentRefs[0].Name = "other" }, "is not the Gateway codeinterp/llm"},
		{"wrong namespace", func(m *manifests) { server(m).svc.Namespace = "default" }, `codeinterp is in namespace "default"`},
		{"route on a listener the Gateway lacks", func(m *manifests) {
			sn := gwapiv1.SectionName("https")
			m.routes[0].Spec.ParentRefs[0].SectionName = &sn
		}, "sectionName https is not a listener of the Gateway llm"},
		{"model in another namespace without a grant", func(m *manifests) {
			ns := gwapiv1.Namespace("models")
			route(m, "codeinterp-passthrough").Spec.Rules[0].BackendRefs[0].Namespace = &ns
		}, "no ReferenceGrant there lets HTTPRoutes from codeinterp name it"},
		{"follow-ups through the Gateway", func(m *manifests) {
			for _, cm := range m.configMaps {
				if cm.Name == "codeinterp-config" {
					cm.Data["codeinterp.yaml"] = strings.Replace(cm.Data["codeinterp.yaml"],
						"http://vllm.codeinterp.svc.cluster.local:8000/v1/responses", "http://llm.codeinterp.svc.cluster.local:80/v1/responses", 1)
				}
			}
		}, "follow-ups must go straight to the same model"},
		{"the model's routes to two models", func(m *manifests) {
			route(m, "codeinterp-passthrough").Spec.Rules[0].BackendRefs[0].Name = "other-model"
		}, "the routes send the model's requests to http://other-model.codeinterp.svc.cluster.local:8000"},
		{"an external model without its Host", func(m *manifests) {
			g, k := gwapiv1.Group(egv1a1.GroupName), gwapiv1.Kind("Backend")
			for _, r := range m.routes {
				for i := range r.Spec.Rules {
					for j := range r.Spec.Rules[i].BackendRefs {
						br := &r.Spec.Rules[i].BackendRefs[j].BackendObjectReference
						if br.Name == "vllm" {
							br.Group, br.Kind, br.Name, br.Port = &g, &k, "codeinterp-model", nil
						}
					}
				}
			}
			m.backends = append(m.backends, &egv1a1.Backend{
				ObjectMeta: metav1.ObjectMeta{Name: "codeinterp-model", Namespace: "codeinterp"},
				Spec:       egv1a1.BackendSpec{Endpoints: []egv1a1.BackendEndpoint{{FQDN: &egv1a1.FQDNEndpoint{Hostname: "vllm.codeinterp.svc.cluster.local", Port: 8000}}}},
			})
		}, `rewrites Host to "", not its host vllm.codeinterp.svc.cluster.local`},
		{"no API container port", func(m *manifests) {
			c := &server(m).d.Spec.Template.Spec.Containers[0]
			c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "api" })
		}, "api.listen port 8081 is not a container port"},
		{"no API Service port", func(m *manifests) {
			server(m).svc.Spec.Ports = slices.DeleteFunc(server(m).svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "api" })
		}, "has no port targeting api.listen's port 8081"},
		{"API route to the model", func(m *manifests) {
			route(m, "codeinterp-api").Spec.Rules[0].BackendRefs[0].Name = "vllm"
		}, "no HTTPRoute sends /v1/containers to the Service codeinterp's API port"},
		{"API route exact", func(m *manifests) {
			pt := gwapiv1.PathMatchExact
			route(m, "codeinterp-api").Spec.Rules[0].Matches[1].Path.Type = &pt
		}, "/v1/files must be a PathPrefix match"},
		{"API route without files", func(m *manifests) {
			r := route(m, "codeinterp-api")
			r.Spec.Rules[0].Matches = r.Spec.Rules[0].Matches[:1]
		}, "no HTTPRoute sends /v1/files"},
		{"API route under the policy", func(m *manifests) {
			m.extPolicies[0].Spec.TargetRefs = append(m.extPolicies[0].Spec.TargetRefs, m.extPolicies[0].Spec.TargetRefs[0])
			m.extPolicies[0].Spec.TargetRefs[1].Name = "codeinterp-api"
		}, "targeted by the extension policy"},
		{"Redis missing", func(m *manifests) {
			m.services = slices.DeleteFunc(m.services, func(s *corev1.Service) bool { return s.Name == "codeinterp-redis" })
		}, "store.redis_url names the Service codeinterp-redis, which is not defined"},
		{"Redis evicts", func(m *manifests) {
			for _, d := range m.deployments {
				if d.Name == "codeinterp-redis" {
					d.Spec.Template.Spec.Containers[0].Args = []string{"--save", ""}
				}
			}
		}, "want --maxmemory-policy noeviction"},
		{"two Redis", func(m *manifests) {
			for _, d := range m.deployments {
				if d.Name == "codeinterp-redis" {
					n := int32(2)
					d.Spec.Replicas = &n
				}
			}
		}, "want exactly 1 replica"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			m, err := loadManifests(readGatewayFiles(t, config.ProviderWASM))
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(m)
			err = checkManifests(m, config.ProviderWASM)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

func gvisorContainer(m *manifests) *corev1.Container {
	return &server(m).d.Spec.Template.Spec.Containers[0]
}

func removeMount(c *corev1.Container, name string) {
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == name })
}

// minimalGVisorPrivileges turns the gVisor Deployment into the smaller,
// non-privileged form its comment describes.
func minimalGVisorPrivileges(m *manifests) {
	c := gvisorContainer(m)
	f := false
	c.SecurityContext.Privileged = &f
	c.SecurityContext.Capabilities = &corev1.Capabilities{
		Drop: []corev1.Capability{"ALL"},
		Add:  append(slices.Clone(runscCapabilities), "SYS_PTRACE"),
	}
	pm := corev1.UnmaskedProcMount
	c.SecurityContext.ProcMount = &pm
	m.runtimeClasses = append(m.runtimeClasses, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "codeinterp-cgroup-writable"}, Handler: "cgroup-writable"})
	rc := "codeinterp-cgroup-writable"
	server(m).d.Spec.Template.Spec.RuntimeClassName = &rc
}

func setGVisorCgroup(t *testing.T, m *manifests, mode string) {
	t.Helper()
	cm := m.configMaps[0]
	old := "    cgroup: auto\n"
	if strings.Count(cm.Data["codeinterp.yaml"], old) != 1 {
		t.Fatalf("the gVisor config no longer contains %q exactly once; update the test", old)
	}
	cm.Data["codeinterp.yaml"] = strings.Replace(cm.Data["codeinterp.yaml"], old, "    cgroup: "+mode+"\n", 1)
}

// The non-privileged alternative the gVisor manifest describes passes the
// same checks (so the tests accept either form, and only those two).
func TestGatewayGVisorMinimalPrivileges(t *testing.T) {
	m, err := loadManifests(readGatewayFiles(t, config.ProviderGVisor))
	if err != nil {
		t.Fatal(err)
	}
	minimalGVisorPrivileges(m)
	setGVisorCgroup(t, m, "v2")
	if err := checkManifests(m, config.ProviderGVisor); err != nil {
		t.Fatalf("the minimal form is rejected:\n%v", err)
	}
}

// gVisor variants that would not run, or not fit, must fail.
func TestGatewayGVisorManifestsBroken(t *testing.T) {
	const file = "codeinterp-gvisor.yaml"
	textCases := []struct {
		name, old, new, want string
	}{
		{"unknown field", "          privileged: true", "          privilegd: true", `unknown field "privilegd"`},
		{"strict ConfigMap config", "      max_sessions: 4", "      max_session: 4", "sandbox.max_session: unknown field"},
		{"strict gvisor section", "        state_dir: /run/codeinterp/gvisor", "        statedir: /run/codeinterp/gvisor", "sandbox.gvisor.statedir: unknown field"},
		{"unknown provider", "      provider: gvisor", "      provider: gviser", `"gviser" is not one of wasm, gvisor`},
		{"the wasm provider", "      provider: gvisor", "      provider: wasm", "sandbox.provider is wasm; this manifest is the gvisor variant"},
		{"bad platform", "        platform: systrap", "        platform: kvmm", `"kvmm" is not one of systrap, ptrace, kvm`},
		{"more sessions than memory", "      max_sessions: 4", "      max_sessions: 5", "memory limit 18Gi <"},
		{"larger sessions than memory", "        max_guest_memory: 4GiB", "        max_guest_memory: 8GiB", "memory limit 18Gi <"},
		{"client limit above the sandbox's", "      max_memory_limit: 4GiB", "      max_memory_limit: 8GiB", "interceptor.max_memory_limit"},
		{"cgroups off", "        cgroup: auto", "        cgroup: \"off\"", "must not be off"},
		{"python outside /usr", "        python: /usr/bin/python3", "        python: /opt/python3/bin/python3", "must be under /usr"},
		{"relative state dir", "        state_dir: /run/codeinterp/gvisor", "        state_dir: run/codeinterp/gvisor", "must be an absolute path"},
		{"state dir off the volume", "        state_dir: /run/codeinterp/gvisor", "        state_dir: /var/lib/runsc", "/var/lib/runsc is not below a writable emptyDir"},
		{"state dir at the mount point", "        state_dir: /run/codeinterp/gvisor", "        state_dir: /run/codeinterp", "must be below a volume's mount point, not at it"},
	}
	for _, tt := range textCases {
		t.Run(tt.name, func(t *testing.T) {
			files := readGatewayFiles(t, config.ProviderGVisor)
			data := string(files[file])
			if strings.Count(data, tt.old) != 1 {
				t.Fatalf("%s no longer contains %q exactly once; update the test", file, tt.old)
			}
			files[file] = []byte(strings.Replace(data, tt.old, tt.new, 1))
			m, err := loadManifests(files)
			if err == nil {
				err = checkManifests(m, config.ProviderGVisor)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}

	f, tr := false, true
	cases := []struct {
		name   string
		mutate func(*testing.T, *manifests)
		want   string
	}{
		{"privileged dropped", func(_ *testing.T, m *manifests) { gvisorContainer(m).SecurityContext.Privileged = &f },
			"runsc needs privileged: true, or capabilities.add"},
		{"privileged dropped, capabilities added, default seccomp", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v2")
			gvisorContainer(m).SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeRuntimeDefault
		}, "seccompProfile must be Unconfined"},
		{"privileged dropped, no SYS_PTRACE for the systrap platform", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v2")
			sc := gvisorContainer(m).SecurityContext
			sc.Capabilities.Add = slices.DeleteFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c == "SYS_PTRACE" })
		}, "missing capabilities [SYS_PTRACE]"},
		{"privileged dropped, masked /proc", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v2")
			gvisorContainer(m).SecurityContext.ProcMount = nil
		}, "procMount must be Unmasked"},
		{"privileged dropped, default AppArmor", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v2")
			gvisorContainer(m).SecurityContext.AppArmorProfile.Type = corev1.AppArmorProfileTypeRuntimeDefault
		}, "appArmorProfile must be Unconfined"},
		{"privileged dropped, no writable cgroupfs", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v2")
			server(m).d.Spec.Template.Spec.RuntimeClassName = nil
		}, "runtimeClassName must name a RuntimeClass"},
		{"privileged dropped, cgroup v1", func(t *testing.T, m *manifests) {
			minimalGVisorPrivileges(m)
			setGVisorCgroup(t, m, "v1")
		}, "sandbox.isolation.cgroup must be v2"},
		{"no privilege escalation with privileged", func(_ *testing.T, m *manifests) {
			gvisorContainer(m).SecurityContext.AllowPrivilegeEscalation = &f
		}, "allowPrivilegeEscalation cannot be false"},
		{"not root", func(_ *testing.T, m *manifests) {
			u := int64(65534)
			gvisorContainer(m).SecurityContext.RunAsUser = &u
		}, "runsc needs root"},
		{"runAsNonRoot", func(_ *testing.T, m *manifests) { gvisorContainer(m).SecurityContext.RunAsNonRoot = &tr }, "runsc needs root"},
		{"writable root filesystem", func(_ *testing.T, m *manifests) { gvisorContainer(m).SecurityContext.ReadOnlyRootFilesystem = &f },
			"readOnlyRootFilesystem must be true"},
		{"state-dir volume not mounted", func(_ *testing.T, m *manifests) { removeMount(gvisorContainer(m), "run") },
			"state_dir /run/codeinterp/gvisor is not below a writable emptyDir"},
		{"state-dir volume read-only", func(_ *testing.T, m *manifests) {
			c := gvisorContainer(m)
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "run" {
					c.VolumeMounts[i].ReadOnly = true
				}
			}
		}, "state_dir /run/codeinterp/gvisor is not below a writable emptyDir"},
		{"state-dir volume not an emptyDir", func(_ *testing.T, m *manifests) {
			for i, v := range server(m).d.Spec.Template.Spec.Volumes {
				if v.Name == "run" {
					server(m).d.Spec.Template.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "codeinterp-config"}},
					}
				}
			}
		}, "state_dir /run/codeinterp/gvisor is not below a writable emptyDir"},
		{"no /tmp", func(_ *testing.T, m *manifests) { removeMount(gvisorContainer(m), "tmp") }, "/tmp is not a writable emptyDir"},
		{"memory limit too small", func(_ *testing.T, m *manifests) {
			gvisorContainer(m).Resources.Limits[corev1.ResourceMemory] = qty("16Gi")
		}, "memory limit 16Gi <"},
		{"memory request too small", func(_ *testing.T, m *manifests) {
			gvisorContainer(m).Resources.Requests[corev1.ResourceMemory] = qty("8Gi")
		}, "memory request 8Gi <"},
		{"environment raises max_sessions", func(_ *testing.T, m *manifests) {
			c := gvisorContainer(m)
			c.Env = append(c.Env, corev1.EnvVar{Name: "CODEINTERP_SANDBOX_MAX_SESSIONS", Value: "16"})
		}, "memory limit 18Gi <"},
		{"environment breaks the config", func(_ *testing.T, m *manifests) {
			c := gvisorContainer(m)
			c.Env = append(c.Env, corev1.EnvVar{Name: "CODEINTERP_SANDBOX_PROVIDER", Value: "docker"})
		}, `"docker" is not one of wasm, gvisor`},
		{"misspelt environment override", func(_ *testing.T, m *manifests) {
			c := gvisorContainer(m)
			c.Env = append(c.Env, corev1.EnvVar{Name: "CODEINTERP_SANDBOX_MAX_SESION", Value: "2"})
		}, "env CODEINTERP_SANDBOX_MAX_SESION matches no configuration field"},
		{"environment from a Secret", func(_ *testing.T, m *manifests) {
			c := gvisorContainer(m)
			c.Env = append(c.Env, corev1.EnvVar{Name: "CODEINTERP_UPSTREAM_URL", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "url"},
			}})
		}, "env CODEINTERP_UPSTREAM_URL: valueFrom cannot be checked"},
		{"probe on the wrong port", func(_ *testing.T, m *manifests) { gvisorContainer(m).ReadinessProbe.GRPC.Port = 9090 },
			"readiness probe: gRPC port 9090"},
		{"no liveness probe", func(_ *testing.T, m *manifests) { gvisorContainer(m).LivenessProbe = nil }, "no liveness probe"},
		{"ConfigMap missing", func(_ *testing.T, m *manifests) { m.configMaps = nil }, "references ConfigMap codeinterp-config, which is not defined"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			m, err := loadManifests(readGatewayFiles(t, config.ProviderGVisor))
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(t, m)
			err = checkManifests(m, config.ProviderGVisor)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

// checkCluster: replicas sharing Redis forward runs to each other, so the
// cluster listener is a container port, advertised at the pod's IP on
// that port, and only the replicas' own pods may reach it.
func checkCluster(m *manifests, d *appsv1.Deployment, gw *gwapiv1.Gateway, cfg *config.Config, policies bool, fail func(string, ...any)) {
	if !cfg.ClusterActive() {
		fail("cluster is not active: replicas sharing Redis would each run their own interpreter of a container")
		return
	}
	c := d.Spec.Template.Spec.Containers[0]
	port, err := portOf(cfg.Cluster.Listen)
	if err != nil {
		fail("cluster.listen: %v", err)
		return
	}
	if _, ok := containerPort(c, intstr.FromInt32(port)); !ok {
		fail("cluster.listen port %d is not a container port", port)
	}
	host, aport, err := net.SplitHostPort(cfg.Cluster.Advertise)
	if err != nil || host != "10.0.0.7" || aport != fmt.Sprint(port) {
		fail("cluster.advertise is %q; want the pod's IP (status.podIP) and port %d", cfg.Cluster.Advertise, port)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if !policies {
		for _, np := range m.netPolicies {
			fail("network policies are off, but NetworkPolicy %s is defined", np.Name)
		}
		return
	}
	replicas := func(f networkingv1.NetworkPolicyPeer) bool {
		if f.PodSelector == nil || f.NamespaceSelector != nil || f.IPBlock != nil {
			return false
		}
		fs, err := metav1.LabelSelectorAsSelector(f.PodSelector)
		return err == nil && !fs.Empty() && fs.Matches(podLabels)
	}
	checkPortPolicy(m, podLabels, int(port), "the replicas", replicas, fail)
	// The other ports (issue 38 row 6): ext_proc trusts what it is sent
	// and the admin port shows every owner's usage.
	gateway := func(f networkingv1.NetworkPolicyPeer) bool {
		if f.PodSelector == nil || f.IPBlock != nil {
			return false
		}
		fs, err := metav1.LabelSelectorAsSelector(f.PodSelector)
		return err == nil && !fs.Empty() && fs.Matches(labels.Set{"gateway.envoyproxy.io/owning-gateway-name": gw.Name,
			"gateway.envoyproxy.io/owning-gateway-namespace": gw.Namespace}) && !fs.Matches(podLabels)
	}
	checkPortPolicy(m, podLabels, listenPort(cfg.Server.Listen), "the Gateway's Envoy pods", gateway, fail)
	checkPortPolicy(m, podLabels, listenPort(cfg.API.Listen), "the Gateway's Envoy pods", gateway, fail)
	monitoring := func(f networkingv1.NetworkPolicyPeer) bool {
		if f.NamespaceSelector == nil || f.PodSelector != nil || f.IPBlock != nil {
			return false
		}
		ns, err := metav1.LabelSelectorAsSelector(f.NamespaceSelector)
		return err == nil && !ns.Empty() && ns.Matches(labels.Set{"kubernetes.io/metadata.name": "monitoring"}) &&
			!ns.Matches(labels.Set{"kubernetes.io/metadata.name": "codeinterp"})
	}
	checkPortPolicy(m, podLabels, listenPort(cfg.Server.AdminListen), "the monitoring namespace", monitoring, fail)
}

// listenPort is the port of a listen address (0 when it has none).
func listenPort(addr string) int {
	n, _ := portOf(addr)
	return int(n)
}

// checkPortPolicy: some NetworkPolicy selecting the pods opens port, and
// every rule that opens it admits only peers allowed says are who, never
// anyone (a rule without peers or without ports).
func checkPortPolicy(m *manifests, podLabels labels.Set, port int, who string, allowed func(networkingv1.NetworkPolicyPeer) bool, fail func(string, ...any)) {
	guarded := false
	for _, np := range m.netPolicies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		for _, r := range np.Spec.Ingress {
			opens := len(r.Ports) == 0
			for _, p := range r.Ports {
				if p.Port != nil && p.Port.IntValue() == port {
					opens = true
				}
			}
			if !opens {
				continue
			}
			only := len(r.From) > 0
			for _, f := range r.From {
				if !allowed(f) {
					only = false
				}
			}
			if !only {
				fail("NetworkPolicy %s lets more than %s reach port %d", np.Name, who, port)
			}
			guarded = true
		}
	}
	if !guarded {
		fail("no NetworkPolicy limits port %d to %s", port, who)
	}
}
