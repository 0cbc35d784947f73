package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// notPublic are the ranges a DNS answer may not point into, beyond what
// netip's predicates cover: a name the sandbox may reach must not become a
// way to the server's own network (DNS rebinding, metadata services).
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: embeds any IPv4, private ones too
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4: embeds any IPv4
}

func isPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// refusal is why a request is not served: the metric's reason, the HTTP
// status and the one line the sandbox's client shows.
type refusal struct {
	reason string
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// resolve turns an allowed host into the one address this connection
// dials. The operator's Resolve map is trusted as given (a local mirror
// may well be on a private address); a DNS answer is not: if any address
// in it is not public the whole answer is refused, and the address checked
// is the address dialled — the name is never looked up again for this
// connection, so an answer that changes later (rebinding) changes nothing.
func (s *Session) resolve(ctx context.Context, host, port string) (string, *refusal) {
	if to, ok := s.cfg.Resolve[host]; ok {
		if _, _, err := net.SplitHostPort(to); err == nil {
			return to, nil
		}
		return net.JoinHostPort(to, port), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	addrs, err := s.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return "", &refusal{reasonResolveFailed, 502, fmt.Sprintf("cannot resolve %s", host)}
	}
	for _, a := range addrs {
		if !isPublic(a) {
			return "", &refusal{reasonPrivateAddress, 403, fmt.Sprintf("%s resolves to a non-public address (%s); refused", host, a.Unmap())}
		}
	}
	return net.JoinHostPort(addrs[0].Unmap().String(), port), nil
}
