package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// FieldError is one problem with one field. Path is the dotted YAML path,
// e.g. "sandbox.limits.run_timeout".
type FieldError struct {
	Path   string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// FieldErrors returns every *FieldError inside err (through errors.Join and
// %w wrapping), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// Error is what Load returns for a file or environment that does not make a
// valid configuration. Err joins *FieldError values (see FieldErrors).
type Error struct {
	Source string // the file name, or "environment"/"defaults"
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid configuration %s:", e.Source)
	for _, fe := range FieldErrors(e.Err) {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads the YAML file at path over the defaults, applies the
// CODEINTERP_* environment overrides (see EnvVars) and validates. An empty
// path means defaults plus environment.
func Load(path string, checks ...Check) (*Config, error) {
	return LoadEnv(path, os.Environ(), checks...)
}

// A Check validates what a package owns, on the options the configuration
// maps to, and returns *FieldError values (joined) at the settings' paths.
// The configuration knows no package; its user (cmd/extproc) passes the
// packages' validators to Load, which reports their problems with its own.
type Check func(*Config) error

// Collect is Validate with the packages' checks: every problem, each a
// *FieldError, in the order of the sections in the file.
func (c *Config) Collect(checks ...Check) error {
	fes := FieldErrors(c.Validate())
	for _, check := range checks {
		fes = append(fes, FieldErrors(check(c))...)
	}
	order := map[string]int{}
	t := reflect.TypeOf(*c)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		order[name] = i
	}
	section := func(fe *FieldError) int {
		name, _, _ := strings.Cut(fe.Path, ".")
		name, _, _ = strings.Cut(name, "[")
		return order[name]
	}
	sort.SliceStable(fes, func(i, j int) bool { return section(fes[i]) < section(fes[j]) })
	errs := make([]error, len(fes))
	for i, fe := range fes {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

// LoadEnv is Load with the environment given as KEY=VALUE strings.
func LoadEnv(path string, environ []string, checks ...Check) (*Config, error) {
	c := Default()
	source := "defaults"
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		source = path
		if c, err = Parse(data); err != nil {
			return nil, &Error{Source: path, Err: err}
		}
	}
	if _, err := c.ApplyEnv(environ); err != nil {
		return nil, &Error{Source: "environment", Err: err}
	}
	c.ApplyProviderDefaults()
	// Validate before normalising so errors quote names as written.
	if err := c.Collect(checks...); err != nil {
		return nil, &Error{Source: source, Err: err}
	}
	c.normalize()
	return c, nil
}

// normalize lowercases header names (HTTP/2 and Envoy use lowercase), so
// users of the config can compare them directly.
func (c *Config) normalize() {
	for i, h := range c.Upstream.ForwardHeaders {
		c.Upstream.ForwardHeaders[i] = strings.ToLower(h)
	}
	for i, h := range c.API.AuthHeaders {
		c.API.AuthHeaders[i] = strings.ToLower(h)
	}
	if len(c.Upstream.Headers) > 0 {
		m := make(map[string]string, len(c.Upstream.Headers))
		for k, v := range c.Upstream.Headers {
			m[strings.ToLower(k)] = v
		}
		c.Upstream.Headers = m
	}
}

// Parse decodes YAML over the defaults, strictly: unknown fields,
// duplicate keys and wrong types are errors naming the field. It does not
// apply the environment or validate.
func Parse(data []byte) (*Config, error) {
	c := Default()
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &FieldError{Reason: "YAML: " + err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, &FieldError{Reason: "YAML: " + err.Error()}
	}
	var errs []error
	switch r := root.(type) {
	case nil: // empty file: all defaults
	case map[string]any:
		decodeStruct("", r, reflect.ValueOf(c).Elem(), &errs)
	default:
		errs = append(errs, &FieldError{Reason: fmt.Sprintf("the document must be a mapping, not %s", jsonKind(root))})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
)

func fieldName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// decodeStruct sets the fields of v named in m. Keys absent from m keep
// their current (default) value; so does an explicit null.
func decodeStruct(path string, m map[string]any, v reflect.Value, errs *[]error) {
	t := v.Type()
	known := map[string]int{}
	for i := range t.NumField() {
		known[fieldName(t.Field(i))] = i
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // stable error order
	for _, k := range keys {
		p := join(path, k)
		i, ok := known[k]
		if !ok {
			*errs = append(*errs, &FieldError{Path: p, Reason: unknownFieldReason(k, t)})
			continue
		}
		raw := m[k]
		if raw == nil {
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != durationType {
			sub, ok := raw.(map[string]any)
			if !ok {
				*errs = append(*errs, &FieldError{Path: p, Reason: fmt.Sprintf("must be a mapping, not %s", jsonKind(raw))})
				continue
			}
			decodeStruct(p, sub, fv, errs)
			continue
		}
		if err := decodeLeaf(raw, fv); err != nil {
			*errs = append(*errs, &FieldError{Path: p, Reason: err.Error()})
		}
	}
}

func unknownFieldReason(k string, t reflect.Type) string {
	var names []string
	for i := range t.NumField() {
		names = append(names, fieldName(t.Field(i)))
	}
	reason := "unknown field"
	if best := closest(k, names); best != "" {
		reason += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return reason + "; known fields: " + strings.Join(names, ", ")
}

// closest returns the candidate within edit distance 2 of k, if any.
func closest(k string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// decodeLeaf sets a non-struct field from a YAML value (as decoded from
// JSON with UseNumber).
func decodeLeaf(raw any, v reflect.Value) error {
	switch {
	case v.Type() == durationType:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf(`must be a duration string such as "30s" or "1m30s", not %s`, jsonKind(raw))
		}
		return setDuration(s, v)
	case v.Type() == byteSizeType:
		switch r := raw.(type) {
		case json.Number:
			return setByteSize(r.String(), v)
		case string:
			return setByteSize(r, v)
		}
		return fmt.Errorf(`must be a size such as 1048576 or "256MiB", not %s`, jsonKind(raw))
	}
	switch v.Kind() {
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("must be a string, not %s (quote it)", jsonKind(raw))
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			return fmt.Errorf("must be true or false, not %s", jsonKind(raw))
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Float64:
		n, ok := raw.(json.Number)
		if !ok {
			return fmt.Errorf("must be a number, not %s", jsonKind(raw))
		}
		return setNumber(n.String(), v)
	case reflect.Slice:
		list, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("must be a list of strings, not %s", jsonKind(raw))
		}
		out := make([]string, 0, len(list))
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("item %d must be a string, not %s", i, jsonKind(e))
			}
			out = append(out, s)
		}
		v.Set(reflect.ValueOf(out))
	case reflect.Map:
		m, ok := raw.(map[string]any)
		if !ok {
			return fmt.Errorf("must be a mapping of strings, not %s", jsonKind(raw))
		}
		out := make(map[string]string, len(m))
		for k, e := range m {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("value of %q must be a string, not %s (quote it)", k, jsonKind(e))
			}
			out[k] = s
		}
		v.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("unsupported field type %s", v.Type()) // a bug in this package, caught by tests
	}
	return nil
}

func setDuration(s string, v reflect.Value) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf(`%q is not a duration: use Go syntax such as "30s", "1m30s", "250ms"`, s)
	}
	v.SetInt(int64(d))
	return nil
}

func setByteSize(s string, v reflect.Value) error {
	b, err := ParseByteSize(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	v.SetInt(int64(b))
	return nil
}

func setNumber(s string, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || (v.Kind() == reflect.Int && (n > math.MaxInt || n < math.MinInt)) {
			return fmt.Errorf("%s is not an integer in range", s)
		}
		v.SetInt(n)
	case reflect.Uint32:
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("%s is not an integer between 0 and %d", s, uint32(math.MaxUint32))
		}
		v.SetUint(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%s is not a number", s)
		}
		v.SetFloat(f)
	}
	return nil
}
