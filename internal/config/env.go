package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "CODEINTERP_"

// EnvVar names one environment override: Name is EnvPrefix plus the field's
// YAML path in upper case with dots as underscores
// (sandbox.limits.run_timeout → CODEINTERP_SANDBOX_LIMITS_RUN_TIMEOUT).
type EnvVar struct {
	Name string
	Path string
}

// EnvVars lists every field that can be overridden, in declaration order.
// Every leaf field can.
func EnvVars() []EnvVar {
	var out []EnvVar
	walkLeaves("", reflect.ValueOf(Default()).Elem(), func(path string, _ reflect.Value) {
		out = append(out, EnvVar{Name: envName(path), Path: path})
	})
	return out
}

func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

func walkLeaves(path string, v reflect.Value, fn func(string, reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		p := join(path, fieldName(t.Field(i)))
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != durationType {
			walkLeaves(p, fv, fn)
			continue
		}
		fn(p, fv)
	}
}

// nonConfigEnv are CODEINTERP_* variables that belong to other parts of the
// project (the runtime build script, the tests), not to this file's fields.
var nonConfigEnv = []string{"CODEINTERP_RUNTIME_DIR", "CODEINTERP_FIXTURES"}

// ApplyEnv sets every field whose CODEINTERP_* variable is present in
// environ (KEY=VALUE strings, as os.Environ). Values are read as:
//   - strings: verbatim (an empty value sets "");
//   - numbers, true/false, durations ("30s"), sizes ("256MiB");
//   - lists: comma-separated ("/v1/responses,/openai/v1/responses"),
//     or a YAML/JSON flow list ("[a, b]"); empty means an empty list;
//   - maps: comma-separated name=value pairs ("x-a=1,x-b=2"), or a YAML/JSON
//     flow mapping ("{x-a: '1'}"); empty means an empty map.
//
// It returns the names applied, and a joined *FieldError per bad value.
func (c *Config) ApplyEnv(environ []string) ([]string, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	var applied []string
	var errs []error
	walkLeaves("", reflect.ValueOf(c).Elem(), func(path string, v reflect.Value) {
		name := envName(path)
		s, ok := env[name]
		if !ok {
			return
		}
		applied = append(applied, name)
		if err := setFromEnv(s, v); err != nil {
			errs = append(errs, &FieldError{Path: path, Reason: fmt.Sprintf("from %s: %v", name, err)})
		}
	})
	return applied, errors.Join(errs...)
}

// UnknownEnv returns the CODEINTERP_* names in environ that match no field
// (likely typos), sorted. Load ignores them; validate-config warns.
func UnknownEnv(environ []string) []string {
	known := map[string]bool{}
	for _, e := range EnvVars() {
		known[e.Name] = true
	}
	for _, n := range nonConfigEnv {
		known[n] = true
	}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, EnvPrefix) && !known[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func setFromEnv(s string, v reflect.Value) error {
	switch {
	case v.Type() == durationType:
		return setDuration(s, v)
	case v.Type() == byteSizeType:
		return setByteSize(s, v)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "1", "yes":
			v.SetBool(true)
		case "false", "0", "no":
			v.SetBool(false)
		default:
			return fmt.Errorf("%q is not true or false", s)
		}
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Float64:
		return setNumber(strings.TrimSpace(s), v)
	case reflect.Slice:
		t := strings.TrimSpace(s)
		if strings.HasPrefix(t, "[") {
			return decodeFlow(t, v)
		}
		out := []string{}
		for _, p := range strings.Split(t, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		v.Set(reflect.ValueOf(out))
	case reflect.Map:
		t := strings.TrimSpace(s)
		if strings.HasPrefix(t, "{") {
			return decodeFlow(t, v)
		}
		out := map[string]string{}
		for _, p := range strings.Split(t, ",") {
			if strings.TrimSpace(p) == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			if !ok {
				return fmt.Errorf("%q is not name=value", strings.TrimSpace(p))
			}
			out[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("unsupported field type %s", v.Type())
	}
	return nil
}

// decodeFlow reads a YAML/JSON flow list or mapping with the file decoder's
// rules, so the environment and the file accept the same values.
func decodeFlow(s string, v reflect.Value) error {
	js, err := yaml.YAMLToJSONStrict([]byte(s))
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return decodeLeaf(val, v)
}
