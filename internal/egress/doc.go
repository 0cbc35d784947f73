// Package egress is the server-side egress proxy that enforces a session's
// network_policy (OpenAI's container network_policy of type allowlist,
// with domain_secrets) for sandboxes that have a network (gVisor).
//
// # Why a proxy outside the sandbox
//
// Code in the sandbox is hostile by assumption: it can open any socket the
// sandbox's network lets it, spell addresses however it likes, and lie in
// every header. So the policy is not enforced in the sandbox at all. The
// sandbox's network reaches only this proxy (a unix socket per session,
// from ListenUnix, or any listener the caller serves), and the proxy
// allows HTTP(S) to the session's allowed domains only. It resolves names
// itself; the sandbox has no DNS. Secrets live only here: the code sees a
// placeholder ("$API_KEY" for a secret named API_KEY) and the proxy puts
// the value into the request headers to that secret's domain.
//
// # What is enforced where
//
// The operator's bound (Config, config: sandbox.network.*) lists the
// domains any request may name; Check refuses a policy that names another,
// more than MaxDomains, or anything that is not a bare hostname (scheme,
// path, port, wildcard, IP literal), and secrets whose domain is not in the
// policy, whose name is not an identifier, whose value is empty, over
// 10 MiB or has control characters, or whose names repeat. A refusal is a
// *PolicyError with the JSON path of the offending field.
//
// Matching is by exact hostname, case-insensitive, one trailing dot
// ignored. Subdomains are not implied: OpenAI documents bare hostnames
// only ("pypi.org", "files.pythonhosted.org"), so "pypi.org" does not
// allow "www.pypi.org" and "allowed.test.evil.test" is just another name.
//
// Per connection from the sandbox:
//
//   - CONNECT host:443 only (any other port is refused). The host must be
//     allowed, a name, never an IP literal in any spelling (dotted, v6,
//     bracketed, zoned, and the decimal, octal and hex forms that
//     inet_aton and URL parsers accept, like 2130706433 or 0x7f.1). The
//     proxy then reads the TLS ClientHello before any byte goes to the
//     origin and refuses a missing SNI or one that differs from the
//     CONNECT host: a tunnel opened to an allowed name cannot carry TLS to
//     another name behind a shared address. A ClientHello with Encrypted
//     Client Hello (or its GREASE, which looks the same) is refused too:
//     its readable server name is only the outer, public one.
//   - Plain HTTP in absolute form (GET http://host/…) to port 80 only. The
//     Host the origin gets is the URL's host: a proxy ignores the client's
//     Host header for absolute-form requests (RFC 9112 §3.2.2), so the
//     two cannot disagree at the origin.
//   - Names are resolved once per connection, by the Resolve map first (the
//     operator's word: a local mirror may be on a private address; a value
//     "host:port" replaces the destination, a bare "host" keeps the port
//     asked for), else
//     by DNS (Config.Resolver). A DNS answer with any loopback, private,
//     link-local, unspecified, multicast, CGNAT, NAT64 or 6to4 address is
//     refused whole, and the checked address is the one dialled: an answer
//     that changes afterwards (DNS rebinding) changes nothing.
//   - For a domain with secrets the proxy terminates TLS with a leaf signed
//     by a per-session CA (CACertPEM, which the sandbox must trust; the CA
//     is name-constrained to the session's secret domains and its key never
//     leaves the server), opens its own TLS to the origin verified against
//     Config.RootCAs (nil: the system roots), and relays HTTP/1.1. Each
//     request must be for that host; in its header values (never names,
//     the URL or the body) each "$NAME" of the domain's secrets becomes the
//     value ("$NAME" as a shell reads it: "$NAMES" is another name). Basic
//     credentials are decoded for it, so pip's
//     https://__token__:$PIP_TOKEN@index/simple works. A placeholder sent to any other domain passes unchanged: the
//     value is only ever written to a connection verified as its domain.
//   - The secret's value is taken back out of that domain's responses
//     (headers, and bodies: plain, gzip or deflate; verbatim or as JSON
//     encoders escape it) and replaced by the placeholder, so an origin
//     that echoes request headers (httpbin.org/headers, OpenAI's own
//     example) does not hand the code the value. Requests to such a domain
//     go without Accept-Encoding; a body in another encoding is refused
//     (502). This is best effort: an origin that transforms the value
//     (base64, a part of it) can still return it, so give secrets only to
//     domains that do not reflect them.
//   - Plain HTTP to a domain with secrets works, but a request that
//     carries one of the domain's placeholders is refused (403): the value
//     is never sent in clear, and forwarding the placeholder instead would
//     fail at the origin in a puzzling way.
//   - Where the proxy sees the response (plain HTTP and terminated TLS) a
//     redirect whose Location leaves the policy is answered 502 with the
//     reason instead of being relayed. Inside a spliced tunnel it cannot
//     see the redirect; the client's next CONNECT to the off-list name is
//     refused like any other.
//   - Budgets per session: MaxConns connections to origins over the
//     session's life (each CONNECT, each plain-HTTP request, each redial
//     of a terminated origin), MaxBytes between the sandbox and the proxy (both
//     directions; the connection that overruns is cut, later requests get
//     429), MaxConcurrent connections at once (429). A header block (the
//     sandbox's, or an origin's) must fit MaxHeaderBytes and arrive whole
//     within IdleTimeout (slow-loris, either side; so an origin must also
//     start answering within it); a ClientHello and a TLS handshake too;
//     after that a flow is cut when no byte has moved in either direction
//     for IdleTimeout, and a dial must succeed within DialTimeout.
//     Session.Close ends every connection at once.
//
// Refusals answer the sandbox's client with an HTTP error and a one-line
// reason (403 policy, 429 budget, 400/431 malformed, 502/504 the origin),
// with the reason's code in X-Codeinterp-Egress-Refused; refusals after a
// tunnel is established (SNI) can only close it.
//
// # What it cannot see
//
// Inside a spliced tunnel it sees nothing past the ClientHello: not the
// path, headers, redirects or bodies. So it cannot stop domain fronting:
// an allowed domain served by a CDN that routes by the encrypted Host
// header may carry requests for another of that CDN's customers. Keep
// allowlists to origins that do not front for others, or give the domain
// a secret (which makes the proxy terminate, and check Host). Where it terminates TLS it reads and
// rewrites headers only; bodies pass as they are, so data the code
// puts in a body to an allowed domain leaves (the allowlist bounds where
// data can go, not what). It carries HTTP/1.1 only where it terminates
// (no h2, no Upgrade/WebSocket); tunnels carry whatever TLS carries. UDP
// and raw sockets are the sandbox network's business: that network must
// reach nothing but this proxy.
//
// # Observability
//
// codeinterp_egress_connections_total{result="allowed"|"refused",reason}
// counts each CONNECT and each plain-HTTP request once (a connection cut
// for its byte budget counts once more, as refused/byte_budget);
// codeinterp_egress_bytes_total{direction="out"|"in"} counts the bytes
// between sandboxes and the proxy. Both are registered on the Registerer
// given to New. Logs (zap) carry host names and reasons, never header
// values, URLs or secrets.
package egress
