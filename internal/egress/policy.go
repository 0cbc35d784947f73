package egress

import (
	"go.opentelemetry.io/otel/trace"

	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/allowlist"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxBytes      = 1 << 30 // 1 GiB: a few large wheels (numpy, pandas) fit with room to spare
	DefaultMaxConns      = 512
	DefaultMaxConcurrent = 64
	DefaultDialTimeout   = 10 * time.Second
	DefaultIdleTimeout   = 30 * time.Second
	// DefaultMaxHeaderBytes bounds a request's or response's header block
	// (as the client sends it, with placeholders, not substituted values).
	DefaultMaxHeaderBytes = 64 << 10

	// MaxSecretValue is OpenAI's bound on domain_secrets[].value (maxLength 10,485,760).
	MaxSecretValue = 10 << 20
	maxSecretName  = 128
)

// Config is the operator's bound (config: sandbox.network.*).
type Config struct {
	// Tracer records each connection's decision (allowed, or refused and
	// why) as a span under the trace of the request that opened the
	// session; nil: none.
	Tracer trace.Tracer

	AllowedDomains []string          // the domains any request may name; empty: the feature is off
	MaxDomains     int               // per policy; 0: no bound beyond AllowedDomains
	MaxBytes       int64             // per session, both directions summed; 0: DefaultMaxBytes
	MaxConns       int               // per session, connections opened over its life; 0: DefaultMaxConns
	Resolve        map[string]string // name -> "host:port" (or "host", keeping the port asked for) used instead of DNS
	RootCAs        *x509.CertPool    // to verify origins when the proxy terminates TLS; nil: the system's

	DialTimeout, IdleTimeout time.Duration // slow-loris bounds; 0: defaults

	// Added after the agreed interface (additions only):

	// MaxConcurrent bounds a session's connections open at once (the
	// sandbox's side); 0: DefaultMaxConcurrent. One more is answered 429.
	MaxConcurrent int
	// MaxHeaderBytes bounds a header block read from either side; 0:
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// Resolver looks up names not in Resolve; nil: net.DefaultResolver.
	Resolver *net.Resolver
}

// Secret and Policy are package allowlist's: the proxy enforces what the
// sandbox interface and the containers carry.
type (
	Secret = allowlist.Secret
	Policy = allowlist.Policy
)

// PolicyError is a policy the operator's bound refuses; Param is the JSON
// path suffix (e.g. "allowed_domains[2]"), Message says why in OpenAI's
// style. Callers turn it into a 400. It never holds a secret's value.
type PolicyError struct{ Param, Message string }

func (e *PolicyError) Error() string { return e.Param + ": " + e.Message }

func (c Config) withDefaults() Config {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

// normHost lowercases a hostname and strips one trailing dot, the forms
// under which the same name is compared everywhere (CONNECT, SNI, Host,
// Location, the operator's list).
func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// hostProblem says why h (already normalised) is not a hostname the proxy
// accepts, or "" if it is one. Refused: schemes, paths, ports, wildcards,
// IP literals in any spelling, and anything outside the LDH rule.
func hostProblem(h string) string {
	switch {
	case h == "":
		return "must be a non-empty hostname"
	case strings.Contains(h, "://"):
		return "must be a bare hostname, without a scheme"
	case strings.ContainsAny(h, "/?#"):
		return "must be a bare hostname, without a path"
	case strings.Contains(h, "*"):
		return "must be a hostname; wildcards are not supported (list each hostname)"
	case isIPLiteral(h):
		return "must be a hostname, not an IP address"
	case strings.Contains(h, ":"):
		return "must be a bare hostname, without a port"
	case len(h) > 253:
		return "is longer than 253 characters"
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "is not a valid hostname (empty or over-long label)"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "is not a valid hostname (a label starts or ends with '-')"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Sprintf("is not a valid hostname (character %q)", c)
			}
		}
	}
	return ""
}

// isIPLiteral reports whether h would be read as an IP address by some
// client or resolver: dotted v4, v6 (bracketed or not, with a zone), and
// the numeric forms URL parsers and inet_aton accept — a last label that is
// all decimal digits or 0x-hex ("2130706433", "0x7f000001", "017700000001",
// "127.1", "0x7f.1"). No registered TLD is numeric, so nothing real is lost.
func isIPLiteral(h string) bool {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if i := strings.IndexByte(h, '%'); i >= 0 {
		h = h[:i]
	}
	if net.ParseIP(h) != nil {
		return true
	}
	labels := strings.Split(h, ".")
	last := labels[len(labels)-1]
	if last == "" && len(labels) > 1 {
		last = labels[len(labels)-2]
	}
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		last = last[2:]
		if last == "" {
			return true // "0x" alone is 0 to inet_aton
		}
		for i := 0; i < len(last); i++ {
			if !strings.ContainsRune("0123456789abcdef", rune(last[i])) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// secretNameProblem says why a secret's name cannot be a placeholder: it
// must be an identifier (letters, digits, '_', not starting with a digit)
// so "$NAME" in a header is unambiguous and shell-safe.
func secretNameProblem(n string) string {
	if n == "" {
		return "must be a non-empty name"
	}
	if len(n) > maxSecretName {
		return fmt.Sprintf("must be at most %d characters", maxSecretName)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return "must be an identifier (letters, digits and '_', not starting with a digit)"
		}
	}
	return ""
}

// secretValueProblem refuses values the proxy cannot put in a header: it
// only ever writes them into header values, where CR, LF or NUL would
// split or end the header.
func secretValueProblem(v string) string {
	if v == "" {
		return "must be non-empty"
	}
	if len(v) > MaxSecretValue {
		return fmt.Sprintf("must be at most %d bytes", MaxSecretValue)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "must not contain control characters (it is sent in a request header)"
		}
	}
	return ""
}

// check validates pol against the operator's bound and returns the
// normalised copy a session uses. It never modifies pol.
func (c *Config) check(pol Policy, operator map[string]bool) (normalised Policy, err error) {
	if len(pol.AllowedDomains) == 0 {
		return Policy{}, &PolicyError{"allowed_domains", "must list at least one domain"}
	}
	if c.MaxDomains > 0 && len(pol.AllowedDomains) > c.MaxDomains {
		return Policy{}, &PolicyError{"allowed_domains", fmt.Sprintf("lists %d domains; this server allows at most %d", len(pol.AllowedDomains), c.MaxDomains)}
	}
	seen := map[string]bool{}
	for i, d := range pol.AllowedDomains {
		param := fmt.Sprintf("allowed_domains[%d]", i)
		h := normHost(strings.TrimSpace(d))
		if p := hostProblem(h); p != "" {
			return Policy{}, &PolicyError{param, fmt.Sprintf("%q %s", d, p)}
		}
		if !operator[h] {
			return Policy{}, &PolicyError{param, fmt.Sprintf("%q is not in this server's list of allowed domains (subdomains are not implied: list each hostname)", d)}
		}
		if !seen[h] {
			seen[h] = true
			normalised.AllowedDomains = append(normalised.AllowedDomains, h)
		}
	}
	names := map[string]bool{}
	for i, s := range pol.Secrets {
		param := fmt.Sprintf("domain_secrets[%d]", i)
		h := normHost(strings.TrimSpace(s.Domain))
		if !seen[h] {
			return Policy{}, &PolicyError{param + ".domain", fmt.Sprintf("%q is not in this policy's allowed_domains", s.Domain)}
		}
		if p := secretNameProblem(s.Name); p != "" {
			return Policy{}, &PolicyError{param + ".name", p}
		}
		if names[s.Name] {
			return Policy{}, &PolicyError{param + ".name", fmt.Sprintf("%q is used by another secret; names must be unique", s.Name)}
		}
		names[s.Name] = true
		if p := secretValueProblem(s.Value); p != "" {
			return Policy{}, &PolicyError{param + ".value", p}
		}
		normalised.Secrets = append(normalised.Secrets, Secret{Domain: h, Name: s.Name, Value: s.Value})
	}
	return normalised, nil
}
