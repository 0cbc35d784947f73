package gvisor

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
)

// A networked sandbox (a session with a network_policy allowlist) still
// runs with --network=none: its only interface is loopback, so nothing in
// it has a route anywhere. Its one way out is the session's egress proxy
// (package egress), which serves a unix socket in the interpreter's
// directory; that directory is bind-mounted read-only at guestNetDir and
// runsc gets --host-uds=open (connect only: the sandbox cannot create host
// sockets) for this sandbox alone. At begin the kernel starts a relay
// listening on 127.0.0.1:guestProxyPort that pipes each connection to the
// socket, and sets the proxy variables, the CA bundle and the
// placeholders of the domain secrets in the code's environment. Code that
// kills the relay only cuts itself off: every check is in the proxy.
//
// The mount point is /srv, an empty directory of every Debian root (and
// of the gVisor image's): runsc makes a mount point the root lacks in the
// host's tree itself, read-only root or not — seen with 0.0~20221219, for
// /run/ci/net and even for a path inside the /tmp tmpfs — which would
// change the shared root filesystem every sandbox uses.
const (
	guestNetDir    = "/srv"
	guestProxySock = guestNetDir + "/proxy.sock"
	guestCABundle  = guestNetDir + "/ca-bundle.pem"
	guestProxyPort = 3128
	// rootCABundle is the root filesystem's system bundle (Debian's
	// ca-certificates), the start of the sandbox's bundle when present.
	rootCABundle = "etc/ssl/certs/ca-certificates.crt"
)

// netBegin is the begin frame's network part (nil: the sandbox stays
// sealed). Nothing in it is secret: placeholders are what the code sees
// instead of the secrets, which stay in the proxy.
type netBegin struct {
	Socket string            `json:"socket"` // the proxy's socket inside the sandbox
	Port   int               `json:"port"`   // the relay's loopback port
	Env    map[string]string `json:"env"`    // added to the code's environment
}

// hostUDS is runsc's --host-uds for the sandbox: only a networked one may
// connect to a host socket (its proxy's, the only one it can name).
func (it *interp) hostUDS() string {
	if it.network {
		return "open"
	}
	return "none"
}

// serveEgress makes the interpreter's egress directory and, for a session
// (es non-nil; a template has none), writes the CA bundle there and serves
// the proxy on a socket in it until Kill. It returns the directory to mount
// and the begin frame's network part.
func (it *interp) serveEgress(es *egress.Session) (string, *netBegin, error) {
	dir := filepath.Join(it.dir, "net")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("gvisor: egress dir: %w", err)
	}
	if es == nil {
		return dir, nil, nil
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(guestCABundle)), it.k.caBundle(es.CACertPEM()), 0o644); err != nil {
		return "", nil, fmt.Errorf("gvisor: egress CA bundle: %w", err)
	}
	l, err := es.ListenUnix(filepath.Join(dir, filepath.Base(guestProxySock)))
	if err != nil {
		return "", nil, fmt.Errorf("gvisor: egress socket: %w", err)
	}
	it.egressL = l
	go func() {
		if err := es.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) {
			it.k.log.Debug("gvisor: egress proxy stopped", zap.String("id", it.id), zap.Error(err))
		}
	}()
	return dir, &netBegin{Socket: guestProxySock, Port: guestProxyPort, Env: netEnv(es.Placeholders())}, nil
}

// caBundle is what code in a networked sandbox trusts: the root's system
// bundle, the operator's extra CAs (Config.ExtraCAPEM: a private mirror's,
// reached through a tunnel the sandbox verifies itself) and the session's
// CA (the proxy's, for the domains whose TLS it terminates to add a secret).
func (k *Kind) caBundle(session []byte) []byte {
	var b bytes.Buffer
	if sys, err := os.ReadFile(filepath.Join(k.cfg.RootFS, rootCABundle)); err == nil {
		b.Write(sys)
	}
	for _, pem := range [][]byte{k.cfg.ExtraCAPEM, session} {
		if len(pem) > 0 {
			if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
				b.WriteByte('\n')
			}
			b.Write(pem)
		}
	}
	return b.Bytes()
}

// netEnv is the environment a networked sandbox's code gets: the proxy for
// every HTTP client that honours the variables (urllib, requests, pip,
// curl), the CA bundle for those that verify TLS with their own, pip told
// to install into the user's site (the root is read-only; the kernel puts
// that directory on sys.path), and each domain secret's name holding its
// placeholder ("API_KEY" → "$API_KEY"), never its value.
func netEnv(placeholders map[string]string) map[string]string {
	proxy := "http://127.0.0.1:" + strconv.Itoa(guestProxyPort)
	env := map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"SSL_CERT_FILE": guestCABundle, "REQUESTS_CA_BUNDLE": guestCABundle, "CURL_CA_BUNDLE": guestCABundle,
		"PIP_CERT": guestCABundle, "PIP_USER": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1",
		"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
	}
	for name, ph := range placeholders {
		// A name no environment can hold, or one of the variables above,
		// gets no variable (the placeholder still works in a header).
		if _, taken := env[name]; !taken && name != "" && !strings.ContainsAny(name, "=\x00") && !strings.Contains(ph, "\x00") {
			env[name] = ph
		}
	}
	return env
}
