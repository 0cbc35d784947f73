package devproxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// header is one entry of a headerMap. Keys are lowercase, as in Envoy.
type header struct{ key, value string }

// headerMap is an ordered multi-map like Envoy's HeaderMap: pseudo-headers
// and duplicate entries are kept in order.
type headerMap struct{ h []header }

func (m *headerMap) get(key string) (string, bool) {
	for _, e := range m.h {
		if e.key == key {
			return e.value, true
		}
	}
	return "", false
}

func (m *headerMap) del(key string) {
	out := m.h[:0]
	for _, e := range m.h {
		if e.key != key {
			out = append(out, e)
		}
	}
	m.h = out
}

// set replaces every value of key, keeping the position of the first.
func (m *headerMap) set(key, value string) {
	for i, e := range m.h {
		if e.key != key {
			continue
		}
		m.h[i].value = value
		out := m.h[:i+1]
		for _, r := range m.h[i+1:] {
			if r.key != key {
				out = append(out, r)
			}
		}
		m.h = out
		return
	}
	m.h = append(m.h, header{key, value})
}

func (m *headerMap) add(key, value string) { m.h = append(m.h, header{key, value}) }

// appendValue follows Envoy's append=true: inline headers are comma-joined,
// others get a duplicate entry. Which headers Envoy keeps inline is an
// implementation detail; the common request/response ones that clients
// compare are treated as inline here.
func (m *headerMap) appendValue(key, value string) {
	if inlineHeaders[key] {
		for i, e := range m.h {
			if e.key == key {
				if e.value == "" {
					m.h[i].value = value
				} else {
					m.h[i].value = e.value + "," + value
				}
				return
			}
		}
	}
	m.add(key, value)
}

var inlineHeaders = map[string]bool{
	"accept-encoding": true, "cache-control": true, "via": true, "x-forwarded-for": true,
}

// proto encodes the map as Envoy does: key plus raw_value, value empty.
func (m *headerMap) proto() *corev3.HeaderMap {
	out := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(m.h))}
	for _, e := range m.h {
		out.Headers = append(out.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return out
}

// httpHeader returns the non-pseudo headers for net/http.
func (m *headerMap) httpHeader() http.Header {
	out := make(http.Header, len(m.h))
	for _, e := range m.h {
		if strings.HasPrefix(e.key, ":") {
			continue
		}
		k := http.CanonicalHeaderKey(e.key)
		out[k] = append(out[k], e.value)
	}
	return out
}

// hopByHop are removed by Envoy's HCM before any filter runs and
// by its HTTP/1 codec on responses.
var hopByHop = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}

func fromHTTP(h http.Header) *headerMap {
	m := &headerMap{}
	for k, vs := range h {
		lk := strings.ToLower(k)
		for _, v := range vs {
			m.add(lk, v)
		}
	}
	for _, k := range hopByHop {
		m.del(k)
	}
	return m
}

// mutationError is a failure Envoy turns into a local reply.
type mutationError struct {
	details string
	err     error
}

func (e *mutationError) Error() string { return e.details + ": " + e.err.Error() }

// errDisallowed marks a mutation the default mutation_rules refuse; Envoy
// skips those (counting rejected_header_mutations) unless
// disallow_is_error is set.
var errDisallowed = errors.New("disallowed by mutation_rules")

// checkSet applies Envoy's default mutation_rules to setting key
// (mutation_rules.cc).
func checkSet(key, value string, appendValue, allowMethod bool) error {
	if err := validHeader(key, value); err != nil {
		return err
	}
	switch {
	case key == ":method" && allowMethod && !appendValue:
		// :method may be set with CONTINUE_AND_REPLACE.
	case key == "host", key == ":authority", key == ":method", key == ":scheme":
		return fmt.Errorf("setting %s: %w", key, errDisallowed)
	case strings.HasPrefix(key, "x-envoy-"):
		return fmt.Errorf("setting %s: %w", key, errDisallowed)
	case strings.HasPrefix(key, ":") && appendValue:
		return fmt.Errorf("appending to %s: %w", key, errDisallowed)
	case key == ":status":
		n, err := strconv.Atoi(value)
		if err != nil || n < 200 || n > 999 {
			return fmt.Errorf(":status %q must be an integer ≥ 200: %w", value, errDisallowed)
		}
	case key == ":path":
	case strings.HasPrefix(key, ":"):
		return fmt.Errorf("setting %s: %w", key, errDisallowed)
	}
	return nil
}

// checkRemove applies the default mutation_rules to removing key: a
// pseudo-header or host never, whatever the rules, and x-envoy-* not by
// default.
func checkRemove(key string) error {
	if err := validHeader(key, ""); err != nil {
		return err
	}
	if strings.HasPrefix(key, ":") || key == "host" {
		return fmt.Errorf("removing %s: %w", key, errDisallowed)
	}
	if strings.HasPrefix(key, "x-envoy-") {
		return fmt.Errorf("removing %s: %w", key, errDisallowed)
	}
	return nil
}

// validHeader rejects names and values Envoy's header map refuses; these
// are always fail-closed errors, never skipped.
func validHeader(key, value string) error {
	name := strings.TrimPrefix(key, ":")
	if name == "" {
		return fmt.Errorf("empty header name %q", key)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("invalid character %q in header name %q", name[i], key)
		}
	}
	if strings.ContainsAny(value, "\x00\r\n") {
		return fmt.Errorf("invalid character in the value of %q", key)
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	case c >= 'A' && c <= 'Z':
		return false // Envoy keys are lowercase
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// mutationResult counts what applyMutation did, for logs and tests.
type mutationResult struct {
	rejected int // disallowed edits that were skipped
}

// applyMutation edits m as Envoy's MutationUtils does: removals first, then
// sets in order; only raw_value is read (a value sent in value alone sets
// the header to ""), append false replaces and true adds. dropContentLength
// is true in the modes where Envoy drops a processor-set content-length;
// allowMethod is set for CONTINUE_AND_REPLACE headers responses, the one
// case where :method may be set.
func applyMutation(m *headerMap, mut *extprocv3.HeaderMutation, disallowIsError, dropContentLength, allowMethod bool) (mutationResult, error) {
	var res mutationResult
	if mut == nil {
		return res, nil
	}
	for _, k := range mut.GetRemoveHeaders() {
		key := strings.ToLower(k)
		if err := checkRemove(key); err != nil {
			if errors.Is(err, errDisallowed) && !disallowIsError {
				res.rejected++
				continue
			}
			return res, &mutationError{"header_mutation_remove_headers_failed", err}
		}
		m.del(key)
	}
	for _, o := range mut.GetSetHeaders() {
		key := strings.ToLower(o.GetHeader().GetKey())
		value := string(o.GetHeader().GetRawValue()) // never .Value: #31555
		//lint:ignore SA1019 ext_proc reads the deprecated append field and never append_action.
		appendValue := o.GetAppend().GetValue()
		if err := checkSet(key, value, appendValue, allowMethod); err != nil {
			if errors.Is(err, errDisallowed) && !disallowIsError {
				res.rejected++
				continue
			}
			return res, &mutationError{"header_mutation_set_headers_failed", err}
		}
		if key == "content-length" && dropContentLength {
			continue
		}
		if appendValue {
			m.appendValue(key, value)
		} else {
			m.set(key, value)
		}
	}
	return res, nil
}
