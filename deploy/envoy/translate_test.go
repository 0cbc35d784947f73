package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/internal/config"
)

// egctlBinary is the pinned egctl (runtime/build-egctl.sh): CODEINTERP_EGCTL,
// else the build script's cache path. The test fails, never skips,
// without it.
func egctlBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CODEINTERP_EGCTL")
	if path == "" {
		out, err := exec.Command("bash", "../../runtime/build-egctl.sh", "--print-path").Output()
		if err != nil {
			t.Fatalf("runtime/build-egctl.sh --print-path: %v", err)
		}
		path = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no egctl at %s (%v): run `make egctl` (runtime/build-egctl.sh builds the pinned egctl)", path, err)
	}
	return path
}

// modelServices stand in for the model server the chart's routes name
// (model.service: vllm:8000, in the release's namespace or in "models"):
// the cluster holds it, the chart does not render it.
const modelServices = `
apiVersion: v1
kind: Service
metadata:
  name: vllm
  namespace: codeinterp
spec:
  selector: {app: vllm}
  ports:
  - {name: http, port: 8000, targetPort: 8000}
---
apiVersion: v1
kind: Service
metadata:
  name: vllm
  namespace: models
spec:
  selector: {app: vllm}
  ports:
  - {name: http, port: 8000, targetPort: 8000}
`

// translatorInput is what Envoy Gateway's controller would see of a
// rendering installed in a cluster holding cluster: the Gateway API and
// Envoy Gateway resources and the core objects it reads (Services,
// Secrets, ConfigMaps, Namespaces). The API server gives each Service a
// cluster IP; the translator routes to it (egctl disables endpoint
// routing), so a stand-in address is set where the rendering has none.
func translatorInput(rendering, cluster []byte) ([]byte, error) {
	var out bytes.Buffer
	ip := 10
	for _, data := range [][]byte{rendering, cluster, []byte(modelServices)} {
		docs, err := splitDocuments(data)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			var obj map[string]any
			if err := yaml.Unmarshal(d, &obj); err != nil {
				return nil, err
			}
			apiVersion, _ := obj["apiVersion"].(string)
			kind, _ := obj["kind"].(string)
			group, _, _ := strings.Cut(apiVersion, "/")
			switch {
			case group == gwapiv1.GroupName || group == egv1a1.GroupName:
			case apiVersion == "v1" && kind == "Service":
				spec, _ := obj["spec"].(map[string]any)
				if spec == nil {
					return nil, fmt.Errorf("Service without spec")
				}
				if spec["clusterIP"] == nil {
					spec["clusterIP"] = fmt.Sprintf("10.96.0.%d", ip)
					ip++
				}
			case apiVersion == "v1" && (kind == "Secret" || kind == "ConfigMap" || kind == "Namespace"):
			default:
				continue
			}
			y, err := yaml.Marshal(obj)
			if err != nil {
				return nil, err
			}
			out.WriteString("---\n")
			out.Write(y)
		}
	}
	return out.Bytes(), nil
}

// translation is egctl's answer: the resources with the statuses Envoy
// Gateway's controller would write, and the xDS configuration per Gateway.
type translation struct {
	GatewayClass           *gwapiv1.GatewayClass          `json:"gatewayClass"`
	Gateways               []*gwapiv1.Gateway             `json:"gateways"`
	HTTPRoutes             []*gwapiv1.HTTPRoute           `json:"httpRoutes"`
	Services               []*corev1.Service              `json:"services"`
	ClientTrafficPolicies  []*egv1a1.ClientTrafficPolicy  `json:"clientTrafficPolicies"`
	EnvoyExtensionPolicies []*egv1a1.EnvoyExtensionPolicy `json:"envoyExtensionPolicies"`
	Backends               []*egv1a1.Backend              `json:"backends"`
	Xds                    map[string]json.RawMessage     `json:"xds"`
}

// translate runs Envoy Gateway's translator on input: `egctl x translate
// --from gateway-api --to gateway-api,xds` (the statuses, and the xDS
// configuration Envoy would be sent). An error of the translator is
// returned with its output.
func translate(t *testing.T, input []byte) (*translation, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(file, input, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(egctlBinary(t), "x", "translate", "--from", "gateway-api", "--to", "gateway-api,xds",
		"--type", "all", "--output", "json", "--file", file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("egctl x translate: %v\n%s%s", err, stderr.String(), stdout.String())
	}
	var tr translation
	if err := json.Unmarshal(stdout.Bytes(), &tr); err != nil {
		return nil, fmt.Errorf("egctl x translate printed what does not decode: %v\n%.2000s", err, stdout.String())
	}
	return &tr, nil
}

// conditionProblems lists the conditions of types that are not True.
func conditionProblems(what string, conds []metav1.Condition, types ...string) []string {
	var out []string
	for _, typ := range types {
		c := findCondition(conds, typ)
		switch {
		case c == nil:
			out = append(out, fmt.Sprintf("%s: no %s condition", what, typ))
		case c.Status != metav1.ConditionTrue:
			out = append(out, fmt.Sprintf("%s: %s is %s (%s: %s)", what, typ, c.Status, c.Reason, c.Message))
		}
	}
	return out
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// policyProblems: a policy attached to nothing, or refused by any of what
// it attaches to.
func policyProblems(what string, st gwapiv1.PolicyStatus) []string {
	if len(st.Ancestors) == 0 {
		return []string{what + ": attached to nothing (no ancestors in its status)"}
	}
	var out []string
	for _, a := range st.Ancestors {
		out = append(out, conditionProblems(fmt.Sprintf("%s on %s", what, a.AncestorRef.Name), a.Conditions, "Accepted")...)
	}
	return out
}

// problems lists every resource the translator did not accept, and every
// reference it could not resolve: what Envoy Gateway's controller would
// write into the statuses in a cluster. m is what it was given: a route
// or policy of m's it left out (one bound to no Gateway of its class) is
// a problem too.
func (tr *translation) problems(m *manifests) []string {
	var out []string
	// ReferenceGrants are read, not reported: a missing one shows as a
	// route's ResolvedRefs False (RefNotPermitted).
	seen := []struct {
		kind          string
		got, rendered int
	}{
		{"Gateway", len(tr.Gateways), len(m.gateways)},
		{"HTTPRoute", len(tr.HTTPRoutes), len(m.routes)},
		{"EnvoyExtensionPolicy", len(tr.EnvoyExtensionPolicies), len(m.extPolicies)},
		{"ClientTrafficPolicy", len(tr.ClientTrafficPolicies), len(m.clientPolicies)},
		{"Backend", len(tr.Backends), len(m.backends)},
	}
	for _, n := range seen {
		if n.got != n.rendered {
			out = append(out, fmt.Sprintf("the translator reports %d %ss of the %d given", n.got, n.kind, n.rendered))
		}
	}
	if tr.GatewayClass == nil {
		out = append(out, "no GatewayClass")
	} else {
		out = append(out, conditionProblems("GatewayClass "+tr.GatewayClass.Name, tr.GatewayClass.Status.Conditions, "Accepted")...)
	}
	if len(tr.Gateways) == 0 {
		out = append(out, "no Gateway")
	}
	for _, g := range tr.Gateways {
		// The translator writes the listeners' status; the Gateway's own
		// conditions come from the controller's infrastructure (its Envoy
		// Deployment and Service), which egctl does not run: refused
		// ones still count.
		what := "Gateway " + g.Namespace + "/" + g.Name
		for _, c := range g.Status.Conditions {
			if c.Type == "Accepted" && c.Status != metav1.ConditionTrue {
				out = append(out, fmt.Sprintf("%s: Accepted is %s (%s: %s)", what, c.Status, c.Reason, c.Message))
			}
		}
		if len(g.Status.Listeners) != len(g.Spec.Listeners) {
			out = append(out, fmt.Sprintf("%s: %d listeners, status for %d", what, len(g.Spec.Listeners), len(g.Status.Listeners)))
		}
		for _, l := range g.Status.Listeners {
			out = append(out, conditionProblems(what+" listener "+string(l.Name), l.Conditions, "Accepted", "ResolvedRefs", "Programmed")...)
		}
	}
	for _, r := range tr.HTTPRoutes {
		what := "HTTPRoute " + r.Namespace + "/" + r.Name
		if len(r.Status.Parents) != len(r.Spec.ParentRefs) {
			out = append(out, fmt.Sprintf("%s: %d parentRefs, status for %d", what, len(r.Spec.ParentRefs), len(r.Status.Parents)))
		}
		for _, p := range r.Status.Parents {
			out = append(out, conditionProblems(fmt.Sprintf("%s on %s", what, p.ParentRef.Name), p.Conditions, "Accepted", "ResolvedRefs")...)
		}
	}
	for _, p := range tr.EnvoyExtensionPolicies {
		out = append(out, policyProblems("EnvoyExtensionPolicy "+p.Namespace+"/"+p.Name, p.Status)...)
	}
	for _, p := range tr.ClientTrafficPolicies {
		out = append(out, policyProblems("ClientTrafficPolicy "+p.Namespace+"/"+p.Name, p.Status)...)
	}
	for _, b := range tr.Backends {
		out = append(out, conditionProblems("Backend "+b.Namespace+"/"+b.Name, b.Status.Conditions, "Accepted")...)
	}
	if len(tr.Xds) == 0 {
		out = append(out, "no xDS configuration")
	}
	return out
}

// checkTranslated runs Envoy Gateway's translator on a rendering (with
// what the cluster holds beside it) and fails on an error of the
// translator, on any resource it did not accept, or on one of m's it
// left out.
func checkTranslated(t *testing.T, rendering, cluster []byte, m *manifests) *translation {
	t.Helper()
	input, err := translatorInput(rendering, cluster)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := translate(t, input)
	if err != nil {
		t.Fatalf("Envoy Gateway's translator fails:\n%v", err)
	}
	if p := tr.problems(m); len(p) > 0 {
		t.Fatalf("Envoy Gateway's translator does not accept the rendering:\n  %s", strings.Join(p, "\n  "))
	}
	cfg, _, err := serverConfig(m, server(m).d)
	if err != nil {
		t.Fatal(err)
	}
	if p := checkXDS(tr, m, cfg); len(p) > 0 {
		t.Fatalf("the xDS configuration Envoy Gateway makes of the rendering:\n  %s", strings.Join(p, "\n  "))
	}
	return tr
}

// The translator check is not vacuous: renderings that a cluster would
// refuse are refused by it, with Envoy Gateway's reason.
func TestChartTranslatorRefuses(t *testing.T) {
	cases := []struct {
		name, set, cluster, want string
	}{
		{"a model in another namespace without its grant", "model.service.namespace=models,model.service.referenceGrant=false", "", "RefNotPermitted"},
		{"a listener of the existing Gateway that admits only its own namespace",
			"gateway.create=false,gateway.name=shared,gateway.namespace=gateways,gateway.sectionName=internal", platformGateway, "NotAllowedByListeners"},
		{"an existing Gateway that is not there", "gateway.create=false,gateway.name=absent", platformGateway, "the translator reports 0 HTTPRoutes of the 3 given"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := helmTemplate(t, "--set", tc.set)
			if err != nil {
				t.Fatalf("helm template --set %s: %v\n%s", tc.set, err, stderr)
			}
			input, err := translatorInput(out, []byte(tc.cluster))
			if err != nil {
				t.Fatal(err)
			}
			m, err := loadManifests(map[string][]byte{"rendering": out, "cluster": []byte(tc.cluster)})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := translate(t, input)
			if err != nil {
				t.Fatalf("Envoy Gateway's translator fails:\n%v", err)
			}
			p := strings.Join(tr.problems(m), "\n")
			if !strings.Contains(p, tc.want) {
				t.Fatalf("the translator's findings:\n%s\nwant one containing %q", p, tc.want)
			}
		})
	}
}

// jsonObjects calls visit on every JSON object under v.
func jsonObjects(v any, visit func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		visit(t)
		for _, e := range t {
			jsonObjects(e, visit)
		}
	case []any:
		for _, e := range t {
			jsonObjects(e, visit)
		}
	}
}

const egExtProcPrefix = "envoy.filters.http.ext_proc/"

// checkXDS: the xDS configuration the translator made for each Gateway
// is what codeinterp needs of Envoy: the ext_proc filter as the policy
// sets it (fail closed, buffered bodies, mode overrides, the policy's
// message timeout), enabled on exactly the server's routes.paths and messages_paths and on no
// other route; the listeners' buffer holding a whole body; and, for a
// model outside the cluster by name, its name as Host.
func checkXDS(tr *translation, m *manifests, cfg *config.Config) []string {
	var out []string
	var host string
	for _, b := range m.backends {
		for _, ep := range b.Spec.Endpoints {
			if ep.FQDN != nil {
				host = ep.FQDN.Hostname
			}
		}
	}
	wantTimeout := ""
	if len(m.extPolicies) == 1 && len(m.extPolicies[0].Spec.ExtProc) == 1 && m.extPolicies[0].Spec.ExtProc[0].MessageTimeout != nil {
		wantTimeout = string(*m.extPolicies[0].Spec.ExtProc[0].MessageTimeout)
	}
	for key, raw := range tr.Xds {
		var dump any
		if err := json.Unmarshal(raw, &dump); err != nil {
			out = append(out, fmt.Sprintf("xDS of %s: %v", key, err))
			continue
		}
		filters, listeners := 0, 0
		var filtered []string
		jsonObjects(dump, func(o map[string]any) {
			switch {
			case o["@type"] == "type.googleapis.com/envoy.config.listener.v3.Listener" && strings.HasPrefix(fmt.Sprint(o["name"]), key+"/"):
				listeners++
				limit, _ := o["perConnectionBufferLimitBytes"].(float64)
				if int64(limit) < int64(cfg.Server.MaxBodyBytes) {
					out = append(out, fmt.Sprintf("xDS listener %s: perConnectionBufferLimitBytes %.0f < server.max_body_bytes %d", o["name"], limit, cfg.Server.MaxBodyBytes))
				}
			case strings.HasPrefix(fmt.Sprint(o["name"]), egExtProcPrefix) && o["typedConfig"] != nil:
				filters++
				tc, _ := o["typedConfig"].(map[string]any)
				pm, _ := tc["processingMode"].(map[string]any)
				switch {
				case tc["failureModeAllow"] == true:
					out = append(out, "xDS ext_proc filter fails open")
				case tc["allowModeOverride"] != true:
					out = append(out, "xDS ext_proc filter: allowModeOverride is not set")
				case pm["requestBodyMode"] != "BUFFERED" || pm["responseBodyMode"] != "BUFFERED":
					out = append(out, fmt.Sprintf("xDS ext_proc filter: body modes %v, want BUFFERED", pm))
				case tc["messageTimeout"] != wantTimeout:
					out = append(out, fmt.Sprintf("xDS ext_proc filter: messageTimeout %v, want the policy's %s", tc["messageTimeout"], wantTimeout))
				}
			case o["match"] != nil && o["route"] != nil:
				match, _ := o["match"].(map[string]any)
				route, _ := o["route"].(map[string]any)
				per, _ := o["typedPerFilterConfig"].(map[string]any)
				for name := range per {
					if strings.HasPrefix(name, egExtProcPrefix) {
						if p, exact := match["path"].(string); exact {
							filtered = append(filtered, p)
						} else {
							out = append(out, fmt.Sprintf("xDS route %v runs ext_proc", match))
						}
					}
				}
				cluster := fmt.Sprint(route["cluster"])
				// The routes' rules to the model (the API's go to codeinterp).
				toModel := strings.HasPrefix(cluster, "httproute/") && !strings.Contains(cluster, "-api/")
				if host != "" && toModel && route["hostRewriteLiteral"] != host {
					out = append(out, fmt.Sprintf("xDS route %v to %s: Host %v, want the model's name %s", match, cluster, route["hostRewriteLiteral"], host))
				}
			}
		})
		if listeners == 0 {
			out = append(out, fmt.Sprintf("xDS of %s: no listener of the Gateway", key))
		}
		if filters == 0 {
			out = append(out, fmt.Sprintf("xDS of %s: no ext_proc filter", key))
		}
		slices.Sort(filtered)
		want := append(slices.Clone(cfg.Routes.Paths), cfg.Routes.MessagesPaths...)
		slices.Sort(want)
		if !slices.Equal(filtered, want) {
			out = append(out, fmt.Sprintf("xDS of %s: ext_proc runs on %v; the server handles routes.paths and messages_paths %v", key, filtered, want))
		}
	}
	return out
}

// checkXDS is not vacuous: the chart's defaults, translated, fail it when
// the server asks for what the xDS configuration does not give.
func TestChartXDSChecks(t *testing.T) {
	out, stderr, err := helmTemplate(t)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	input, err := translatorInput(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := translate(t, input)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(*config.Config, *manifests)
		want   string
	}{
		{"as it is", func(*config.Config, *manifests) {}, ""},
		{"bodies larger than the listener's buffer", func(c *config.Config, _ *manifests) { c.Server.MaxBodyBytes *= 2 },
			"perConnectionBufferLimitBytes 16777216 < server.max_body_bytes 33554432"},
		{"a path the filter does not run on", func(c *config.Config, _ *manifests) {
			c.Routes.Paths = append(c.Routes.Paths, "/v1/chat/completions")
		}, "ext_proc runs on [/v1/messages /v1/responses]; the server handles routes.paths and messages_paths [/v1/chat/completions /v1/messages /v1/responses]"},
		{"another message timeout", func(_ *config.Config, m *manifests) {
			d := gwapiv1.Duration("900s")
			m.extPolicies[0].Spec.ExtProc[0].MessageTimeout = &d
		}, "messageTimeout 600s, want the policy's 900s"},
		{"a model outside the cluster without its Host", func(_ *config.Config, m *manifests) {
			m.backends = append(m.backends, &egv1a1.Backend{Spec: egv1a1.BackendSpec{
				Endpoints: []egv1a1.BackendEndpoint{{FQDN: &egv1a1.FQDNEndpoint{Hostname: "models.example.com", Port: 443}}}}})
		}, "want the model's name models.example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := loadManifests(map[string][]byte{"rendering": out})
			if err != nil {
				t.Fatal(err)
			}
			cfg, _, err := serverConfig(m, server(m).d)
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(cfg, m)
			p := strings.Join(checkXDS(tr, m, cfg), "\n")
			if tc.want == "" && p != "" || !strings.Contains(p, tc.want) {
				t.Fatalf("checkXDS: %q\nwant %q", p, tc.want)
			}
		})
	}
}
