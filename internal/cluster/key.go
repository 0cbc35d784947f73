package cluster

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// The cluster key: every replica derives the same Ed25519 key pair from
// the cluster secret, and the forwarding channel is TLS 1.3 in which both
// ends must prove they hold it (a certificate whose public key is the
// derived one, signed for in the handshake). The certificate itself is
// self-signed and made at start: only its key counts.

// keyLabel is the HKDF info the key is derived with: another label (a
// later version) makes another key from the same secret.
const keyLabel = "codeinterp cluster key v1"

// errDifferentKey is a peer's key that is not the cluster key.
var errDifferentKey = errors.New("the peer has a different cluster key")

// clusterKey is the key pair derived from secret, and a certificate for it.
type clusterKey struct {
	pub  ed25519.PublicKey
	cert tls.Certificate
}

func deriveKey(secret string) (*clusterKey, error) {
	seed, err := hkdf.Key(sha256.New, []byte(secret), nil, keyLabel, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "codeinterp cluster replica"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("cluster: a certificate for the cluster key: %w", err)
	}
	return &clusterKey{pub: pub, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}}, nil
}

// check accepts a handshake only when the peer presented a certificate
// for the cluster key (TLS 1.3 has then proven it holds the private key).
func (k *clusterKey) check(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok || len(pub) != len(k.pub) || subtle.ConstantTimeCompare(pub, k.pub) != 1 {
		return errDifferentKey
	}
	return nil
}

// serverTLS requires every client to prove the cluster key before a byte
// of gRPC is read. refused is told of each client that did not.
func (k *clusterKey) serverTLS(refused func(error)) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{k.cert},
		// Any certificate, then its key checked against the cluster key:
		// there is no CA, only the key.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := k.check(cs)
			if err != nil {
				refused(err)
			}
			return err
		},
	}
}

// clientTLS sends nothing but the handshake to a server until it proved
// the cluster key. verified is told of each handshake's outcome (nil: the
// key was proven; errDifferentKey: another key answered).
func (k *clusterKey) clientTLS(verified func(error)) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{k.cert},
		// No chain to verify (there is no CA): VerifyConnection checks
		// the server's key instead, which is the whole of the trust.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := k.check(cs)
			verified(err)
			return err
		},
	}
}
