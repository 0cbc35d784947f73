package egress

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
)

// echConfigList builds an ECHConfigList (draft-ietf-tls-esni, version
// 0xfe0d) for X25519 / HKDF-SHA256 / AES-128-GCM with the given public
// (outer) name: enough for crypto/tls's client to send a real ECH.
func echConfigList(t *testing.T, publicName string) []byte {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.PublicKey().Bytes()
	var c []byte
	c = append(c, 7)                             // config_id
	c = binary.BigEndian.AppendUint16(c, 0x0020) // DHKEM(X25519, HKDF-SHA256)
	c = binary.BigEndian.AppendUint16(c, uint16(len(pub)))
	c = append(c, pub...)
	c = binary.BigEndian.AppendUint16(c, 4)      // one cipher suite
	c = binary.BigEndian.AppendUint16(c, 0x0001) // HKDF-SHA256
	c = binary.BigEndian.AppendUint16(c, 0x0001) // AES-128-GCM
	c = append(c, 0)                             // maximum_name_length
	c = append(c, byte(len(publicName)))
	c = append(c, publicName...)
	c = binary.BigEndian.AppendUint16(c, 0) // no extensions
	cfg := binary.BigEndian.AppendUint16(nil, extensionECH)
	cfg = binary.BigEndian.AppendUint16(cfg, uint16(len(c)))
	cfg = append(cfg, c...)
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(cfg))), cfg...)
}

// TestECHRefused: with Encrypted Client Hello the SNI the proxy reads is
// the outer, public name (here an allowed one) while the inner, encrypted
// one may be anything the same provider serves; such a tunnel is refused.
func TestECHRefused(t *testing.T) {
	e := newEnv(t)
	before := e.counter("refused", reasonECH)
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		t.Fatalf("CONNECT: %q %v", buf, err)
	}
	tc := tls.Client(c, &tls.Config{
		ServerName:                     "evil.test",
		RootCAs:                        e.ca.pool,
		MinVersion:                     tls.VersionTLS13,
		EncryptedClientHelloConfigList: echConfigList(t, "allowed.test"),
	})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake succeeded")
	}
	if d := e.counter("refused", reasonECH) - before; d != 1 {
		t.Errorf("refused{ech} went up by %v, want 1", d)
	}
	if e.tlsSeen.count() != 0 {
		t.Error("the origin was reached")
	}
}
