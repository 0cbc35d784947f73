package egress

import "github.com/prometheus/client_golang/prometheus"

// Reasons label codeinterp_egress_connections_total. A fixed set, so the
// series are bounded whatever the sandbox sends; none carries a host name.
const (
	reasonTunnel     = "tunnel"     // allowed: CONNECT spliced, TLS end to end
	reasonTerminated = "terminated" // allowed: CONNECT to a domain with secrets, TLS terminated here
	reasonHTTP       = "http"       // allowed: plain-HTTP request forwarded

	reasonNotAllowed      = "not_allowed"      // the name is not in the session's allowed_domains
	reasonIPLiteral       = "ip_literal"       // an IP address in any spelling instead of a name
	reasonBadHost         = "bad_host"         // not a hostname at all
	reasonBadPort         = "bad_port"         // CONNECT to a port other than 443, HTTP to one other than 80
	reasonBadRequest      = "bad_request"      // not a proxy request (origin form, https absolute form, malformed)
	reasonHeaderTooLarge  = "header_too_large" // a header block over MaxHeaderBytes
	reasonSNIMissing      = "sni_missing"      // a tunnel's ClientHello names no server
	reasonSNIMismatch     = "sni_mismatch"     // a tunnel's ClientHello names another server than CONNECT
	reasonNotTLS          = "not_tls"          // a tunnel that does not start with a TLS ClientHello
	reasonECH             = "ech"              // a ClientHello with Encrypted Client Hello (the real name is hidden)
	reasonHostMismatch    = "host_mismatch"    // a request inside a terminated tunnel for another host
	reasonPrivateAddress  = "private_address"  // DNS answered a loopback/private/link-local/... address
	reasonResolveFailed   = "resolve_failed"   // DNS failed
	reasonDialFailed      = "dial_failed"      // the origin refused or did not answer in DialTimeout
	reasonUpstreamFailed  = "upstream_failed"  // the origin's TLS or HTTP failed
	reasonRedirect        = "redirect_off_list"
	reasonSecretPlain     = "secret_over_plain_http" // a secret's placeholder in a plain-HTTP request
	reasonEncodedResponse = "encoded_response"       // a secret domain's body in an encoding the proxy cannot scan
	reasonConnBudget      = "conn_budget"            // MaxConns spent
	reasonConcurrency     = "concurrency"            // MaxConcurrent open
	reasonByteBudget      = "byte_budget"            // MaxBytes spent (counted when a connection is cut)
	reasonTimeout         = "timeout"                // a header or ClientHello not read within IdleTimeout
	reasonClosed          = "session_closed"
)

type metrics struct {
	conns *prometheus.CounterVec
	bytes *prometheus.CounterVec
	// pre-resolved children for the per-read hot path
	bytesUp, bytesDown prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codeinterp", Name: "egress_connections_total",
			Help: "Egress proxy requests (CONNECT tunnels and plain-HTTP requests) by result (allowed, refused) and reason.",
		}, []string{"result", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codeinterp", Name: "egress_bytes_total",
			Help: "Bytes between sandboxes and the egress proxy, by direction (out: from the sandbox, in: to it).",
		}, []string{"direction"}),
	}
	m.bytesUp = m.bytes.WithLabelValues("out")
	m.bytesDown = m.bytes.WithLabelValues("in")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.conns, m.bytes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) allowed(reason string) { m.conns.WithLabelValues("allowed", reason).Inc() }
func (m *metrics) refused(reason string) { m.conns.WithLabelValues("refused", reason).Inc() }
