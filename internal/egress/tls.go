package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"time"
)

// sessionCA signs the leaf certificates the proxy shows the sandbox for the
// domains whose requests it rewrites. It is name-constrained to exactly
// those domains, so even a sandbox that trusts it trusts nothing else
// through it; its key never leaves the server's memory.
type sessionCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

type leafCert struct{ cert *tls.Certificate }

// newKey makes a certificate's key and random serial number, the part a
// CA and its leaves make alike.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, sn, nil
}

func newCA(domains []string) (*sessionCA, error) {
	key, sn, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                sn,
		Subject:                     pkix.Name{CommonName: "codeinterp egress session CA", Organization: []string{"codeinterp"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(30 * 24 * time.Hour),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         domains,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &sessionCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (ca *sessionCA) leaf(host string) (*tls.Certificate, error) {
	key, sn, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}, nil
}

// errPeeked stops the handshake once the ClientHello is read.
var errPeeked = errors.New("egress: client hello read")

// extensionECH is the encrypted_client_hello extension: with it the server
// name the proxy reads (the outer one) need not be the one the client
// reaches.
const extensionECH = 0xfe0d

// peekClientHello reads a TLS ClientHello from r with crypto/tls's own
// parser and returns the server name it asks for, whether it carries ECH,
// and every byte it read, to be replayed to whichever side finishes the
// handshake. Nothing is written to the client.
func peekClientHello(r io.Reader) (serverName string, ech bool, read []byte, err error) {
	var buf bytes.Buffer
	var got bool
	hs := tls.Server(readOnlyConn{r: io.TeeReader(r, &buf)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			serverName, got = h.ServerName, true
			for _, e := range h.Extensions {
				ech = ech || e == extensionECH
			}
			return nil, errPeeked
		},
	})
	herr := hs.Handshake()
	if !got {
		return "", false, buf.Bytes(), fmt.Errorf("not a TLS ClientHello: %w", herr)
	}
	return serverName, ech, buf.Bytes(), nil
}

type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "egress", Net: "unix"} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "sandbox", Net: "unix"} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// replayConn is the client's connection with the peeked bytes put back in
// front; deadlines are the metered connection's business.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
