package egresstest

import (
	"archive/zip"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test domains. TLS names are served by the HTTPS origin, PlainDomain
// by the HTTP one. EvilDomain and SubdomainTrick resolve to the HTTPS
// origin too, so only the proxy's policy keeps them out.
const (
	AllowedDomain  = "allowed.test"
	SecretDomain   = "secret.test"   // has a domain secret: the proxy terminates TLS
	IndexDomain    = "pypi.test"     // the package index
	RedirectDomain = "redirect.test" // /away redirects to EvilDomain
	PlainDomain    = "plain.test"    // plain HTTP
	EvilDomain     = "evil.test"
	SubdomainTrick = AllowedDomain + "." + EvilDomain
)

// Package is the wheel the index serves.
const (
	Package = "tinypkg"
	Version = "0.1"
	// Answer is what tinypkg.answer() returns.
	Answer = "tinypkg says 42"
)

// Origins are the test's servers and what reached them.
type Origins struct {
	CAPEM  []byte         // the test CA (the proxy and the sandbox trust it)
	CAPool *x509.CertPool // the same, for egress.Config.RootCAs
	HTTPS  *httptest.Server
	HTTP   *httptest.Server
	Wheel  []byte // tinypkg-0.1-py3-none-any.whl

	mu   sync.Mutex
	auth map[string][]string // host → Authorization headers received
	hits map[string]int      // host → requests
}

// Start starts the origins for tb's life.
func Start(tb testing.TB) *Origins {
	tb.Helper()
	o := &Origins{auth: map[string][]string{}, hits: map[string]int{}}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "codeinterp egresstest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	o.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	o.CAPool = x509.NewCertPool()
	o.CAPool.AddCert(ca)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: AllowedDomain},
		DNSNames:  []string{AllowedDomain, SecretDomain, IndexDomain, RedirectDomain, EvilDomain, SubdomainTrick},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	if o.Wheel, err = wheel(); err != nil {
		tb.Fatal(err)
	}
	o.HTTPS = httptest.NewUnstartedServer(http.HandlerFunc(o.serve))
	o.HTTPS.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	o.HTTPS.StartTLS()
	o.HTTP = httptest.NewServer(http.HandlerFunc(o.serve))
	tb.Cleanup(o.HTTPS.Close)
	tb.Cleanup(o.HTTP.Close)
	return o
}

// Resolve is egress.Config.Resolve for the test domains.
func (o *Origins) Resolve() map[string]string {
	https := o.HTTPS.Listener.Addr().String()
	m := map[string]string{PlainDomain: o.HTTP.Listener.Addr().String()}
	for _, d := range []string{AllowedDomain, SecretDomain, IndexDomain, RedirectDomain, EvilDomain, SubdomainTrick} {
		m[d] = https
	}
	return m
}

// HTTPSPort is the HTTPS origin's real port (for IP-literal attempts).
func (o *Origins) HTTPSPort() int { return o.HTTPS.Listener.Addr().(*net.TCPAddr).Port }

// Authorization returns the Authorization headers host received.
func (o *Origins) Authorization(host string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.auth[host]...)
}

// Hits returns how many requests reached host.
func (o *Origins) Hits(host string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[host]
}

func (o *Origins) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	o.mu.Lock()
	o.hits[host]++
	if a := r.Header.Get("Authorization"); a != "" {
		o.auth[host] = append(o.auth[host], a)
	}
	o.mu.Unlock()
	switch {
	case r.URL.Path == "/away":
		http.Redirect(w, r, "https://"+EvilDomain+"/hello", http.StatusFound)
	case r.URL.Path == "/simple/":
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/simple/%s/\">%s</a></body></html>\n", Package, Package)
	case r.URL.Path == "/simple/"+Package+"/":
		sum := sha256.Sum256(o.Wheel)
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n",
			wheelName(), hex.EncodeToString(sum[:]), wheelName())
	case r.URL.Path == "/files/"+wheelName():
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(o.Wheel)
	default:
		// Never echoes a header: what the code reads back must not carry
		// a secret the proxy added.
		fmt.Fprintf(w, "hello from %s\n", host)
	}
}

func wheelName() string { return Package + "-" + Version + "-py3-none-any.whl" }

// wheel builds tinypkg's wheel: a module, its METADATA, WHEEL and RECORD.
func wheel() ([]byte, error) {
	dist := Package + "-" + Version + ".dist-info/"
	files := []struct{ name, body string }{
		{Package + "/__init__.py", "def answer():\n    return " + fmt.Sprintf("%q", Answer) + "\n"},
		{dist + "METADATA", "Metadata-Version: 2.1\nName: " + Package + "\nVersion: " + Version + "\n"},
		{dist + "WHEEL", "Wheel-Version: 1.0\nGenerator: codeinterp-egresstest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "RECORD,,\n")
	w, err := zw.Create(dist + "RECORD")
	if err != nil {
		return nil, err
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
