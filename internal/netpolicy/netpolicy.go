package netpolicy

import (
	"errors"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Mask replaces a domain secret's value wherever a policy is echoed.
const Mask = "[redacted]"

// MaxSecretValueBytes is OpenAI's bound on one domain secret's value
// (maxLength 10,485,760).
const MaxSecretValueBytes = 10 << 20

// The policy types.
const (
	TypeDisabled  = "disabled"
	TypeAllowlist = "allowlist"
)

// Checker is the operator's bound on policies (*egress.Proxy).
type Checker interface {
	// Enabled reports whether allowlists are on (sandbox.network.allowed_domains set).
	Enabled() bool
	// Check refuses a policy outside the bound with an *egress.PolicyError.
	Check(pol egress.Policy) error
}

// Gate is what this server can give a sandbox.
type Gate struct {
	// Provider is the sandbox provider's name: only "gvisor" has sockets.
	Provider string
	// Checker is the egress proxy; nil when the server has none (the
	// feature is off, or the provider cannot have it).
	Checker Checker
}

// ProviderWithNetwork is the one provider whose sandbox can reach the proxy.
const ProviderWithNetwork = "gvisor"

// offered returns the refusal of an allowlist this server cannot honour, or nil.
func (g Gate) offered(param string) *apierror.Error {
	const howTo = " Network allowlists need the gVisor provider (sandbox.provider: gvisor) with sandbox.network.allowed_domains set by the operator."
	switch {
	case g.Provider == "":
		return apierror.Invalid(param, "unsupported_parameter",
			"Invalid value for '%s': containers on this server have no network access, so it can only be {\"type\": \"disabled\"}."+howTo, param)
	case g.Provider != ProviderWithNetwork:
		return apierror.Invalid(param, "unsupported_parameter",
			"Invalid value for '%s': this server's code_interpreter runs in the %s sandbox, which has no sockets at all (no network access), so it can only be {\"type\": \"disabled\"}."+howTo, param, g.Provider)
	case g.Checker == nil || !g.Checker.Enabled():
		return apierror.Invalid(param, "unsupported_parameter",
			"Invalid value for '%s': network access is turned off on this server (no network access), so it can only be {\"type\": \"disabled\"}. "+
				"The operator turns allowlists on with sandbox.network.allowed_domains.", param)
	}
	return nil
}

// Parse reads the network_policy value v found at param. It returns nil
// for {"type": "disabled"}, null or an absent value: the sandbox stays
// sealed. The policy returned has passed the operator's bound.
func (g Gate) Parse(v gjson.Result, param string) (*egress.Policy, *apierror.Error) {
	if !v.Exists() || v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsObject() {
		return nil, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an object, but got %s instead.", param, jsonx.TypeName(v))
	}
	typ := v.Get("type")
	switch {
	case !typ.Exists():
		return nil, apierror.Invalid(param+".type", "missing_required_parameter", "Missing required parameter: '%s.type'.", param)
	case typ.Type != gjson.String || (typ.Str != TypeDisabled && typ.Str != TypeAllowlist):
		return nil, apierror.Invalid(param+".type", "invalid_value", "Invalid value for '%s.type': expected one of 'disabled' or 'allowlist'.", param)
	}
	var apiErr *apierror.Error
	v.ForEach(func(k, _ gjson.Result) bool {
		switch {
		case k.Str == "type":
		case typ.Str == TypeAllowlist && (k.Str == "allowed_domains" || k.Str == "domain_secrets"):
		default:
			apiErr = apierror.Invalid(param+"."+k.Str, "unknown_parameter", "Unknown parameter: '%s.%s'.", param, k.Str)
		}
		return apiErr == nil
	})
	if apiErr != nil {
		return nil, apiErr
	}
	if typ.Str == TypeDisabled {
		return nil, nil
	}
	if e := g.offered(param); e != nil {
		return nil, e
	}
	pol := &egress.Policy{}
	if pol.AllowedDomains, apiErr = domains(v.Get("allowed_domains"), param+".allowed_domains"); apiErr != nil {
		return nil, apiErr
	}
	if pol.Secrets, apiErr = secrets(v.Get("domain_secrets"), param+".domain_secrets"); apiErr != nil {
		return nil, apiErr
	}
	if err := g.Checker.Check(*pol); err != nil {
		var pe *egress.PolicyError
		if errors.As(err, &pe) {
			p := param
			if pe.Param != "" {
				p += "." + pe.Param
			}
			return nil, apierror.Invalid(p, "invalid_value", "Invalid value for '%s': %s", p, pe.Message)
		}
		return nil, apierror.Invalid(param, "invalid_value", "Invalid value for '%s': the policy is refused.", param)
	}
	return pol, nil
}

func domains(v gjson.Result, param string) ([]string, *apierror.Error) {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return nil, apierror.Invalid(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
	case !v.IsArray():
		return nil, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an array of strings, but got %s instead.", param, jsonx.TypeName(v))
	}
	var out []string
	var apiErr *apierror.Error
	v.ForEach(func(_, d gjson.Result) bool {
		p := param + "[" + strconv.Itoa(len(out)) + "]"
		switch {
		case d.Type != gjson.String:
			apiErr = apierror.Invalid(p, "invalid_type", "Invalid type for '%s': expected a string, but got %s instead.", p, jsonx.TypeName(d))
		case d.Str == "":
			apiErr = apierror.Invalid(p, "empty_string", "Invalid '%s': empty string. Expected a domain such as pypi.org.", p)
		}
		out = append(out, d.Str)
		return apiErr == nil
	})
	if apiErr != nil {
		return nil, apiErr
	}
	if len(out) == 0 {
		return nil, apierror.Invalid(param, "empty_array", "Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead.", param)
	}
	return out, nil
}

func secrets(v gjson.Result, param string) ([]egress.Secret, *apierror.Error) {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return nil, nil
	case !v.IsArray():
		return nil, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an array of objects, but got %s instead.", param, jsonx.TypeName(v))
	}
	var out []egress.Secret
	var apiErr *apierror.Error
	v.ForEach(func(_, s gjson.Result) bool {
		p := param + "[" + strconv.Itoa(len(out)) + "]"
		if !s.IsObject() {
			apiErr = apierror.Invalid(p, "invalid_type", "Invalid type for '%s': expected an object, but got %s instead.", p, jsonx.TypeName(s))
			return false
		}
		s.ForEach(func(k, _ gjson.Result) bool {
			if k.Str != "domain" && k.Str != "name" && k.Str != "value" {
				apiErr = apierror.Invalid(p+"."+k.Str, "unknown_parameter", "Unknown parameter: '%s.%s'.", p, k.Str)
			}
			return apiErr == nil
		})
		var f [3]string
		for i, k := range []string{"domain", "name", "value"} {
			if apiErr != nil {
				return false
			}
			fv := s.Get(k)
			fp := p + "." + k
			switch {
			case !fv.Exists() || fv.Type == gjson.Null:
				apiErr = apierror.Invalid(fp, "missing_required_parameter", "Missing required parameter: '%s'.", fp)
			case fv.Type != gjson.String:
				apiErr = apierror.Invalid(fp, "invalid_type", "Invalid type for '%s': expected a string, but got %s instead.", fp, jsonx.TypeName(fv))
			case fv.Str == "":
				apiErr = apierror.Invalid(fp, "empty_string", "Invalid '%s': empty string. Expected a string with minimum length 1, but got an empty string instead.", fp)
			case k == "value" && len(fv.Str) > MaxSecretValueBytes:
				// The message never quotes a value.
				apiErr = apierror.Invalid(fp, "string_above_max_length", "Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", fp, MaxSecretValueBytes, len(fv.Str))
			}
			f[i] = fv.Str
		}
		if apiErr != nil {
			return false
		}
		out = append(out, egress.Secret{Domain: f[0], Name: f[1], Value: f[2]})
		return true
	})
	if apiErr != nil {
		return nil, apiErr
	}
	if len(out) == 0 {
		return nil, apierror.Invalid(param, "empty_array", "Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead.", param)
	}
	return out, nil
}

// RedactTools returns a request's raw "tools" array with the value of
// every domain secret of a code_interpreter tool's container replaced by
// Mask: what a Response object echoes and the store keeps. Anything it
// cannot read is returned as it came (a request that reached here passed
// Parse, so its secrets are where this looks).
func RedactTools(tools string) string {
	t := gjson.Parse(tools)
	if !t.IsArray() {
		return tools
	}
	out := tools
	i := 0
	t.ForEach(func(_, tool gjson.Result) bool {
		secrets := tool.Get("container.network_policy.domain_secrets")
		if tool.Get("type").Str == "code_interpreter" && secrets.IsArray() {
			j := 0
			secrets.ForEach(func(_, s gjson.Result) bool {
				if s.Get("value").Exists() {
					path := strconv.Itoa(i) + ".container.network_policy.domain_secrets." + strconv.Itoa(j) + ".value"
					if r, err := sjson.Set(out, path, Mask); err == nil {
						out = r
					}
				}
				j++
				return true
			})
		}
		i++
		return true
	})
	return out
}

// Echo is the Container object's network_policy: the type and the
// domains, never the secrets.
type Echo struct {
	Type           string   `json:"type"`
	AllowedDomains []string `json:"allowed_domains"`
}

// EchoOf is the Container object's form of a stored policy (nil: none,
// which the object leaves out).
func EchoOf(sp *store.NetworkPolicy) *Echo {
	if sp == nil {
		return nil
	}
	return &Echo{Type: TypeAllowlist, AllowedDomains: append([]string(nil), sp.AllowedDomains...)}
}

// Stored is what the store keeps of pol: its domains and its secrets'
// domains and names, never a value.
func Stored(pol *egress.Policy) *store.NetworkPolicy {
	if pol == nil {
		return nil
	}
	sp := &store.NetworkPolicy{AllowedDomains: append([]string(nil), pol.AllowedDomains...)}
	for _, s := range pol.Secrets {
		sp.Secrets = append(sp.Secrets, store.SecretRef{Domain: s.Domain, Name: s.Name})
	}
	return sp
}
