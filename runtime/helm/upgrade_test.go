package helm

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

// How the chart is installed here, and the Secrets it generates.
const (
	chartDir  = "../../charts/codeinterp"
	release   = "codeinterp"
	namespace = "codeinterp"
)

var (
	secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	// name → the key the server reads from it.
	generated = map[string]string{"codeinterp-checkpoints": "key", "codeinterp-redis": "password"}
)

// cluster answers Helm's lookup from an in-memory object tracker
// (client-go's fake dynamic client): the API server's part in `helm
// upgrade`, which cannot run here. Only Secrets are looked up by the chart;
// any other kind is an error, so a new lookup shows up here.
type cluster struct {
	client *dynamicfake.FakeDynamicClient
}

func newCluster() *cluster {
	return &cluster{dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{secretsGVR: "SecretList"})}
}

func (c *cluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, fmt.Errorf("the test cluster serves v1 Secret only, not %s %s", apiVersion, kind)
	}
	return c.client.Resource(secretsGVR), true, nil
}

// apply stores the rendered Secrets as `helm install` would create them.
func (c *cluster) apply(t *testing.T, secrets map[string]*unstructured.Unstructured) {
	t.Helper()
	for _, s := range secrets {
		if _, err := c.client.Resource(secretsGVR).Namespace(namespace).Create(context.Background(), s.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// render renders the chart with Helm's engine (the one `helm install` and
// `helm upgrade` run), lookup answered by c, and returns its Secrets.
func render(t *testing.T, c *cluster, revision int, vals map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	opts := common.ReleaseOptions{Name: release, Namespace: namespace, Revision: revision, IsInstall: revision == 1, IsUpgrade: revision > 1}
	values, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, opts, common.DefaultCapabilities, false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.RenderWithClientProvider(chrt, values, c)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]*unstructured.Unstructured{}
	for path, text := range out {
		if !strings.HasSuffix(path, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		for _, doc := range strings.Split(text, "\n---") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if obj["kind"] != "Secret" {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			secrets[u.GetName()] = u
		}
	}
	return secrets
}

// value is a Secret's key as the pod sees it (data is base64).
func value(t *testing.T, s *unstructured.Unstructured, key string) string {
	t.Helper()
	enc, _, _ := unstructured.NestedString(s.Object, "data", key)
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(dec) == 0 {
		t.Fatalf("Secret %s: data.%s %q is not base64 of a value: %v", s.GetName(), key, enc, err)
	}
	return string(dec)
}

// An install generates the checkpoint key and the Redis password; an
// upgrade, finding them in the cluster, renders the same values (the
// replicas' cluster key and the Redis they share stay the same); another
// install, on another cluster, gets new ones.
func TestGeneratedSecretsKeptAcrossUpgrades(t *testing.T) {
	for _, provider := range []string{"wasm", "gvisor"} {
		t.Run(provider, func(t *testing.T) {
			vals := map[string]any{"provider": provider}
			c := newCluster()
			first := render(t, c, 1, vals)
			for name := range generated {
				if first[name] == nil {
					t.Fatalf("the install renders no Secret %s (rendered: %v)", name, keys(first))
				}
			}
			key, err := base64.StdEncoding.DecodeString(value(t, first["codeinterp-checkpoints"], "key"))
			if err != nil || len(key) != 32 {
				t.Fatalf("the checkpoint key is not base64 of 32 bytes: %d bytes, %v", len(key), err)
			}
			if pw := value(t, first["codeinterp-redis"], "password"); len(pw) < 32 {
				t.Fatalf("the Redis password has %d characters; want 32 or more", len(pw))
			}
			c.apply(t, first)

			for revision := 2; revision <= 3; revision++ {
				next := render(t, c, revision, vals)
				for name, k := range generated {
					if next[name] == nil {
						t.Fatalf("revision %d renders no Secret %s: the upgrade would delete it", revision, name)
					}
					if got, want := value(t, next[name], k), value(t, first[name], k); got != want {
						t.Errorf("revision %d: Secret %s's %s changed across the upgrade", revision, name, k)
					}
				}
			}

			// The same chart on an empty cluster: new values, so the
			// equality above is lookup's doing, not a fixed value.
			other := render(t, newCluster(), 1, vals)
			for name, k := range generated {
				if value(t, other[name], k) == value(t, first[name], k) {
					t.Errorf("a second install on another cluster rendered the same %s %s", name, k)
				}
			}
		})
	}
}

// The operator's own Secrets: the chart renders none, and never looks up
// or overwrites theirs.
func TestExistingSecretsNotRendered(t *testing.T) {
	vals := map[string]any{
		"checkpoints": map[string]any{"key": map[string]any{"existingSecret": "ops-key"}},
		"redis":       map[string]any{"auth": map[string]any{"existingSecret": "ops-redis"}},
	}
	if got := render(t, newCluster(), 1, vals); len(got) != 0 {
		t.Fatalf("with existing Secrets the chart renders %v; want none", keys(got))
	}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
