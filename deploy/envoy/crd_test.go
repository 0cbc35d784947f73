package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/internal/config"
)

// The CustomResourceDefinitions come from the same module versions as the
// Go types (go.mod), read from the module cache: Envoy Gateway ships its
// CRDs inside a Helm template, Gateway API as plain YAML.
var crdFiles = []struct{ module, path string }{
	{"github.com/envoyproxy/gateway", "charts/gateway-crds-helm/templates/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml"},
	{"github.com/envoyproxy/gateway", "charts/gateway-crds-helm/templates/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml"},
	{"github.com/envoyproxy/gateway", "charts/gateway-crds-helm/templates/generated/gateway.envoyproxy.io_backends.yaml"},
	{"sigs.k8s.io/gateway-api", "config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml"},
	{"sigs.k8s.io/gateway-api", "config/crd/standard/gateway.networking.k8s.io_gateways.yaml"},
	{"sigs.k8s.io/gateway-api", "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"},
	{"sigs.k8s.io/gateway-api", "config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml"},
}

// crdValidator validates custom resources as the API server does at
// creation: the CRD's OpenAPI schema (types, enums, patterns, bounds,
// required fields) and its x-kubernetes-validations CEL rules, after
// applying the schema's defaults. Admission webhooks are not run.
type crdValidator struct {
	sv    validation.SchemaValidator
	struc *schema.Structural
	cel   *cel.Validator
}

func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("cannot locate module %s in the module cache (go list -m): %v", module, err)
	}
	return dir
}

// loadCRDValidators returns validators keyed by "apiVersion Kind".
func loadCRDValidators(t *testing.T) map[string]*crdValidator {
	t.Helper()
	out := map[string]*crdValidator{}
	dirs := map[string]string{}
	for _, f := range crdFiles {
		if dirs[f.module] == "" {
			dirs[f.module] = moduleDir(t, f.module)
		}
		data, err := os.ReadFile(filepath.Join(dirs[f.module], f.path))
		if err != nil {
			t.Fatalf("CRD missing from module %s: %v", f.module, err)
		}
		// Drop the Helm template's {{- if }} / {{- end }} wrapper lines.
		var lines [][]byte
		for _, l := range bytes.Split(data, []byte("\n")) {
			if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("{{")) {
				lines = append(lines, l)
			}
		}
		docs, err := splitDocuments(bytes.Join(lines, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				t.Fatalf("%s: %v", f.path, err)
			}
			for _, v := range crd.Spec.Versions {
				if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					continue
				}
				var internal apiextensions.JSONSchemaProps
				if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
					t.Fatalf("%s %s: %v", crd.Name, v.Name, err)
				}
				sv, _, err := validation.NewSchemaValidator(&internal)
				if err != nil {
					t.Fatalf("%s %s: %v", crd.Name, v.Name, err)
				}
				st, err := schema.NewStructural(&internal)
				if err != nil {
					t.Fatalf("%s %s: %v", crd.Name, v.Name, err)
				}
				key := crd.Spec.Group + "/" + v.Name + " " + crd.Spec.Names.Kind
				out[key] = &crdValidator{sv: sv, struc: st, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
			}
		}
	}
	return out
}

// unstructured decodes a YAML document the way the API server sees it:
// JSON values with whole numbers as int64.
func unstructured(doc []byte) (map[string]any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var conv func(any) any
	conv = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = conv(e)
			}
		case []any:
			for i, e := range t {
				t[i] = conv(e)
			}
		case json.Number:
			if i, err := t.Int64(); err == nil {
				return i
			}
			f, _ := t.Float64()
			return f
		}
		return x
	}
	m, ok := conv(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("document is not a mapping")
	}
	return m, nil
}

func (v *crdValidator) validate(obj map[string]any) field.ErrorList {
	// The API server applies the schema's defaults before validating; CEL
	// rules rely on them (e.g. a backendRef's kind defaults to Service).
	defaulting.Default(obj, v.struc)
	errs := validation.ValidateCustomResource(nil, obj, v.sv)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.struc, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// validateCustomResources runs every Gateway API / Envoy Gateway document
// through its CRD and returns the findings and how many were checked.
func validateCustomResources(validators map[string]*crdValidator, files map[string][]byte) (int, error) {
	var errs []string
	checked := 0
	for name, data := range files {
		docs, err := splitDocuments(data)
		if err != nil {
			return 0, err
		}
		for i, doc := range docs {
			obj, err := unstructured(doc)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s document %d: %v", name, i+1, err))
				continue
			}
			apiVersion, _ := obj["apiVersion"].(string)
			kind, _ := obj["kind"].(string)
			if !strings.Contains(apiVersion, "gateway.") {
				continue // built-in Kubernetes kinds: strict Go decoding only
			}
			v := validators[apiVersion+" "+kind]
			if v == nil {
				errs = append(errs, fmt.Sprintf("%s document %d: no CRD loaded for %s %s", name, i+1, apiVersion, kind))
				continue
			}
			checked++
			for _, e := range v.validate(obj) {
				errs = append(errs, fmt.Sprintf("%s %s: %v", name, kind, e))
			}
		}
	}
	if len(errs) > 0 {
		return checked, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return checked, nil
}

func TestGatewayManifestsAgainstCRDs(t *testing.T) {
	validators := loadCRDValidators(t)
	for _, provider := range providers() {
		t.Run(provider, func(t *testing.T) {
			n, err := validateCustomResources(validators, readGatewayFiles(t, provider))
			if err != nil {
				t.Fatalf("the API server would reject:\n%v", err)
			}
			if n != 7 { // GatewayClass, Gateway, 3 HTTPRoutes, ClientTrafficPolicy, EnvoyExtensionPolicy
				t.Fatalf("validated %d custom resources, want 7", n)
			}
		})
	}
}

// Values the Go types accept but the CRDs reject.
func TestGatewayManifestsAgainstCRDsBroken(t *testing.T) {
	validators := loadCRDValidators(t)
	cases := []struct {
		name, file, old, new, want string
	}{
		{"duration syntax", "codeinterp.yaml", "messageTimeout: 600s", "messageTimeout: 10 minutes", "messageTimeout"},
		{"body mode enum", "codeinterp.yaml", "      request:\n        body: Buffered", "      request:\n        body: buffered", `Unsupported value: "buffered"`},
		{"quantity pattern", "codeinterp.yaml", "bufferLimit: 16Mi", "bufferLimit: 16.5Mi", "bufferLimit"},
		{"CEL: policy target kind", "codeinterp.yaml", "    kind: HTTPRoute\n    name: codeinterp-responses", "    kind: Service\n    name: codeinterp-responses",
			"this policy can only have a targetRefs[*].kind"},
		{"CEL: no target", "codeinterp.yaml", "  targetRefs:\n  - group: gateway.networking.k8s.io\n    kind: HTTPRoute\n    name: codeinterp-responses\n", "",
			"either targetRef or targetRefs must be used"},
		{"route path must be absolute", "codeinterp.yaml", "        value: /v1/responses\n", "        value: v1/responses\n", "value"},
		{"listener port range", "codeinterp.yaml", "    port: 80\n", "    port: 70000\n", "port"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			files := readGatewayFiles(t, config.ProviderWASM)
			data := string(files[tt.file])
			if strings.Count(data, tt.old) != 1 {
				t.Fatalf("%s no longer contains %q exactly once; update the test", tt.file, tt.old)
			}
			files[tt.file] = []byte(strings.Replace(data, tt.old, tt.new, 1))
			_, err := validateCustomResources(validators, files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}
