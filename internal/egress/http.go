package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// hopHeaders are connection-scoped (RFC 9110 §7.6.1) and never relayed;
// Upgrade and Expect are answered or dropped here so no protocol switch
// (WebSocket, h2c) escapes the proxy's view.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect",
}

func stripHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// origin is the proxy's connection to one origin for one flow: dialled
// once at the address resolved for the flow, redialled (to that same
// address, charged to the budget again) when the origin closes it.
type origin struct {
	s      *Session
	host   string
	addr   string
	act    *activity
	client *meteredConn // the sandbox's side of the flow
	tls    bool
	raw    *meteredConn
	rw     io.ReadWriter
	rd     *reader
}

func (o *origin) ensure() *refusal {
	if o.raw == nil {
		if rf := o.s.budget(); rf != nil {
			return rf
		}
		c, rf := o.s.dial(o.s.ctx, o.host, o.addr, o.act)
		if rf != nil {
			return rf
		}
		o.raw = c
	}
	if o.rw != nil {
		return nil
	}
	if !o.tls {
		o.rw, o.rd = o.raw, newReader(o.raw)
		return nil
	}
	tc := tls.Client(o.raw, &tls.Config{
		ServerName: o.host,
		RootCAs:    o.s.cfg.RootCAs,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
		// Resumption saves the origin's certificate check on every
		// tunnel after the first (the sandbox's pip opens many).
		ClientSessionCache: o.s.tlsCache,
	})
	o.raw.fixedRead = deadline(o.s.cfg.IdleTimeout)
	err := tc.Handshake()
	o.raw.fixedRead = zeroTime
	if err != nil {
		o.drop()
		return &refusal{reasonUpstreamFailed, 502, fmt.Sprintf("TLS to %s failed: %v", o.host, err)}
	}
	o.rw, o.rd = tc, newReader(tc)
	return nil
}

func (o *origin) drop() {
	o.s.closeUpstream(o.raw)
	o.raw, o.rw, o.rd = nil, nil, nil
}

// roundTrip sends req and reads the response's header block under the
// header bounds (the origin must start and finish its header within
// IdleTimeout: a trickling origin is cut). Informational responses are
// skipped; 101 is refused since Upgrade was stripped.
func (o *origin) roundTrip(req *http.Request) (*http.Response, *refusal) {
	if err := req.Write(o.rw); err != nil {
		o.drop()
		if errors.Is(err, errByteBudget) {
			return nil, &refusal{reasonByteBudget, 429, "this session's byte budget is spent"}
		}
		return nil, &refusal{reasonUpstreamFailed, 502, fmt.Sprintf("sending the request to %s failed", o.host)}
	}
	resp, err := readHeader(o.s, o.raw, o.rd, func(br *bufio.Reader) (*http.Response, error) {
		for {
			resp, err := http.ReadResponse(br, req)
			if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
				return resp, err
			}
		}
	})
	switch {
	case err == nil && resp.StatusCode == http.StatusSwitchingProtocols:
		o.drop()
		return nil, &refusal{reasonUpstreamFailed, 502, fmt.Sprintf("%s switched protocols; not supported through this proxy", o.host)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		o.drop()
		return nil, &refusal{reasonTimeout, 504, fmt.Sprintf("%s did not send its response headers within %s", o.host, o.s.cfg.IdleTimeout)}
	case errors.Is(err, errHeaderTooLarge):
		o.drop()
		return nil, &refusal{reasonHeaderTooLarge, 502, fmt.Sprintf("%s sent a header block over %d bytes", o.host, o.s.cfg.MaxHeaderBytes)}
	case err != nil:
		o.drop()
		return nil, &refusal{reasonUpstreamFailed, 502, fmt.Sprintf("%s sent no valid response", o.host)}
	}
	return resp, nil
}

// prepare turns the sandbox's request into the one sent to host: no
// hop-by-hop headers, the Host the policy checked, and 100-continue
// answered here (the body is relayed as it comes).
func prepare(client io.Writer, req *http.Request, host, port string) error {
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") && req.ContentLength != 0 {
		if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return err
		}
	}
	stripHop(req.Header)
	req.Host = host
	if port != "" {
		req.Host = net.JoinHostPort(host, port)
	}
	req.RequestURI = ""
	return nil
}

// relay writes the origin's response to the sandbox's client and says
// whether that connection may carry another request.
func relay(client io.Writer, resp *http.Response, clientClose bool) (keep bool, err error) {
	defer resp.Body.Close()
	stripHop(resp.Header)
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Close = clientClose
	if resp.ContentLength == -1 && len(resp.TransferEncoding) == 0 && resp.Body != http.NoBody {
		resp.Close = true // read until the origin closes: so must the client
	}
	if err := resp.Write(client); err != nil {
		return false, err
	}
	return !resp.Close, nil
}

// checkRedirect refuses a 3xx whose Location leaves the policy: the
// client would follow it to a place the proxy then has to refuse anyway,
// and a terminated request must not carry its credentials there.
func (s *Session) checkRedirect(base *url.URL, resp *http.Response) *refusal {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	u, err := base.Parse(loc)
	if err != nil {
		return &refusal{reasonRedirect, 502, "the origin redirected to an unparseable Location; refused"}
	}
	port := u.Port()
	switch {
	case u.Scheme == "https" && (port == "" || port == "443"), u.Scheme == "http" && (port == "" || port == "80"):
	default:
		return &refusal{reasonRedirect, 502, fmt.Sprintf("the origin redirected to %s://%s, outside this session's network policy; refused", u.Scheme, u.Host)}
	}
	if _, rf := s.authorise(u.Hostname()); rf != nil {
		return &refusal{reasonRedirect, 502, fmt.Sprintf("the origin redirected to %s, outside this session's network policy; refused", u.Hostname())}
	}
	return nil
}

// substitute replaces each placeholder of host's secrets in the header
// values (never names, never the URL or body) with the secret's value.
func (s *Session) substitute(host string, h http.Header) {
	secrets := s.secrets[host]
	if len(secrets) == 0 {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			if k == "Authorization" || k == "Proxy-Authorization" {
				v = substituteBasic(v, secrets)
			}
			vs[i] = replacePlaceholders(v, secrets, true)
		}
	}
}

// substituteBasic handles the one header where a client encodes what the
// code wrote: "Authorization: Basic base64(user:pass)", which pip and
// requests send for https://user:$TOKEN@index/ URLs. The credentials are
// decoded, substituted and encoded again.
func substituteBasic(v string, secrets []Secret) string {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return v
	}
	sub := replacePlaceholders(string(raw), secrets, true)
	if sub == string(raw) {
		return v
	}
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(sub))
}

func (s *Session) hasPlaceholder(host string, h http.Header) bool {
	for k, vs := range h {
		for _, v := range vs {
			if replacePlaceholders(v, s.secrets[host], false) != v {
				return true
			}
			if (k == "Authorization" || k == "Proxy-Authorization") && substituteBasic(v, s.secrets[host]) != v {
				return true
			}
		}
	}
	return false
}

func isIdent(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}

// replacePlaceholders substitutes "$NAME" where NAME is a whole
// identifier, as a shell reads it: "$API_KEYS" is not "$API_KEY". With
// subst false it only reports (by returning a different string) whether
// there is one.
func replacePlaceholders(v string, secrets []Secret, subst bool) string {
	if strings.IndexByte(v, '$') < 0 {
		return v
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(v); i++ {
		if v[i] != '$' {
			continue
		}
		j := i + 1
		for j < len(v) && isIdent(v[j]) {
			j++
		}
		name := v[i+1 : j]
		for _, sec := range secrets {
			if sec.Name == name {
				if !subst {
					return v + "$"
				}
				b.WriteString(v[last:i])
				b.WriteString(sec.Value)
				last = j
				break
			}
		}
		i = j - 1
	}
	if last == 0 {
		return v
	}
	b.WriteString(v[last:])
	return b.String()
}

// forwardHTTP serves one absolute-form request to http://host[:80]/. It
// dials the origin for this request alone (resolved and checked afresh),
// and says whether the client's connection carries on.
func (s *Session) forwardHTTP(c *meteredConn, req *http.Request) bool {
	defer req.Body.Close()
	if !req.URL.IsAbs() || req.URL.Host == "" {
		s.refuse(c, c, "", &refusal{reasonBadRequest, 400, "this is a proxy: send absolute-form requests (http://host/…) or CONNECT host:443"})
		return false
	}
	if req.URL.Scheme != "http" {
		s.refuse(c, c, "", &refusal{reasonBadRequest, 400, fmt.Sprintf("scheme %q: use CONNECT for https, nothing else is proxied", req.URL.Scheme)})
		return false
	}
	host, rf := s.authorise(req.URL.Hostname())
	if port := req.URL.Port(); rf == nil && port != "" && port != "80" {
		rf = &refusal{reasonBadPort, 403, fmt.Sprintf("plain HTTP is allowed to port 80 only, not %s", port)}
	}
	if rf == nil && s.hasPlaceholder(host, req.Header) {
		// The code asked for a secret over plain HTTP: substituting would
		// send it in clear across the network, passing the placeholder on
		// would fail in a puzzling way. Say so instead.
		rf = &refusal{reasonSecretPlain, 403, fmt.Sprintf("%s has secrets; they are only sent over https (a placeholder was found in a plain-HTTP request)", host)}
	}
	if rf == nil {
		rf = s.budget()
	}
	var addr string
	if rf == nil {
		addr, rf = s.resolve(s.ctx, host, "80")
	}
	if rf != nil {
		s.refuse(c, c, host, rf)
		return false
	}
	o := &origin{s: s, host: host, addr: addr, act: c.act, client: c}
	o.raw, rf = s.dial(s.ctx, host, addr, c.act)
	if rf != nil {
		s.refuse(c, c, host, rf)
		return false
	}
	defer o.drop()
	clientClose := req.Close
	base := *req.URL
	if err := prepare(c, req, host, ""); err != nil {
		return false
	}
	req.Close = true // one origin connection per request: each is checked and counted
	if rf = o.ensure(); rf == nil {
		var resp *http.Response
		if resp, rf = o.roundTrip(req); rf == nil {
			if rf = s.checkRedirect(&base, resp); rf == nil {
				s.allow(host, reasonHTTP)
				keep, err := relay(c, resp, clientClose)
				return keep && err == nil
			}
			resp.Body.Close()
		}
	}
	s.refuse(c, c, host, rf)
	return false
}

// relayTerminated serves one request inside a terminated tunnel to host:
// it must be for host, gets the host's placeholders substituted, and its
// response is relayed unless it redirects off the policy.
func (s *Session) relayTerminated(tc *tls.Conn, req *http.Request, o *origin) bool {
	defer req.Body.Close()
	host := o.host
	reqHost := req.Host
	if req.URL.IsAbs() {
		if req.URL.Scheme != "https" {
			s.refuse(tc, o.client, host, &refusal{reasonHostMismatch, 403, "only https requests travel in this tunnel"})
			return false
		}
		reqHost = req.URL.Host
	}
	h, p := reqHost, ""
	if hh, pp, err := net.SplitHostPort(reqHost); err == nil {
		h, p = hh, pp
	}
	if normHost(h) != host || p != "" && p != "443" {
		s.refuse(tc, o.client, host, &refusal{reasonHostMismatch, 403, fmt.Sprintf("a request for %q inside the tunnel to %s; refused", reqHost, host)})
		return false
	}
	clientClose := req.Close
	if err := prepare(tc, req, host, ""); err != nil {
		return false
	}
	req.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	req.Close = false
	s.substitute(host, req.Header)
	req.Header.Del("Accept-Encoding") // plain bodies, so the echo of a secret can be taken out
	base := &url.URL{Scheme: "https", Host: host, Path: req.URL.Path}
	rf := o.ensure()
	var resp *http.Response
	if rf == nil {
		resp, rf = o.roundTrip(req)
	}
	if rf == nil {
		if rf = s.checkRedirect(base, resp); rf == nil {
			rf = redactResponse(resp, s.echoes[host])
		}
		if rf != nil {
			resp.Body.Close()
			o.drop()
		}
	}
	if rf != nil {
		s.refuse(tc, o.client, host, rf)
		return false
	}
	originClose := resp.Close
	keep, err := relay(tc, resp, clientClose)
	if originClose || err != nil {
		o.drop()
	}
	return keep && err == nil
}
