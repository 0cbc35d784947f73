package cluster_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// recorder is a listener the test owns: every byte any connection sends
// it, raw, and (tls set) every byte read after a completed handshake.
type recorder struct {
	lis  net.Listener
	tls  *tls.Config
	mu   sync.Mutex
	raw  bytes.Buffer
	app  bytes.Buffer
	done sync.WaitGroup
}

func record(t *testing.T, cfg *tls.Config) *recorder {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{lis: lis, tls: cfg}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			r.done.Add(1)
			go func() { defer r.done.Done(); r.serve(c) }()
		}
	}()
	return r
}

type rawTap struct {
	net.Conn
	r *recorder
}

func (c rawTap) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.r.mu.Lock()
	c.r.raw.Write(b[:n])
	c.r.mu.Unlock()
	return n, err
}

func (r *recorder) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var in io.Reader = rawTap{c, r}
	if r.tls != nil {
		tc := tls.Server(rawTap{c, r}, r.tls)
		if tc.Handshake() != nil {
			_, _ = io.Copy(io.Discard, rawTap{c, r})
			return
		}
		in = tc
	}
	b := make([]byte, 32<<10)
	for {
		n, err := in.Read(b)
		if r.tls != nil {
			r.mu.Lock()
			r.app.Write(b[:n])
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// close stops the listener and waits for its connections to end; then
// the bytes recorded are all there will be.
func (r *recorder) close() (raw, app []byte) {
	_ = r.lis.Close()
	r.done.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raw.Bytes(), r.app.Bytes()
}

// otherKeyTLS is a TLS server with a key that is not the cluster's and
// asks for no client certificate: what someone's listener at a rewritten
// address would be.
func otherKeyTLS(t *testing.T) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the cluster"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}

// TestRewrittenAddressGetsNothing: anyone who can write Redis can point a
// lease at a listener of theirs. The forwarding replica then sends it
// nothing readable — no gRPC request, no code, not the secret — and the
// run fails as for an unreachable holder (not a gone one: nothing is
// stolen on an attacker's word).
func TestRewrittenAddressGetsNothing(t *testing.T) {
	url := redistest.Start(t)
	o, _ := goredis.ParseURL(url)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	const marker = "print('the-code-marker-7f3a')"
	for _, tc := range []struct {
		name string
		tls  *tls.Config
	}{
		{"plain TCP", nil},
		{"TLS with another key", otherKeyTLS(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			a := startReplica(t, url, secret, 10*time.Second)
			b := startReplicaLog(t, url, secret, 10*time.Second, zap.New(core))
			key := "cntr_" + strings.ReplaceAll(tc.name, " ", "_")
			claim(t, a.node, key)
			rec := record(t, tc.tls)
			if err := rdb.HSet(context.Background(), "codeinterp:lease:"+key, "addr", rec.lis.Addr().String()).Err(); err != nil {
				t.Fatal(err)
			}
			l, mine := claim(t, b.node, key)
			if mine || l.Addr != rec.lis.Addr().String() {
				t.Fatalf("B's view of the rewritten lease: %+v mine=%v", l, mine)
			}
			for range 2 {
				_, err := b.node.Forward(context.Background(), key, l, []byte(marker), nil)
				if !errors.Is(err, cluster.ErrUnreachable) || errors.Is(err, cluster.ErrGone) {
					t.Fatalf("forwarding to the rewritten address: %v, want ErrUnreachable", err)
				}
			}
			_ = b.node.Close()
			raw, app := rec.close()
			if len(raw) == 0 {
				t.Fatal("the listener received no bytes at all: the test proves nothing")
			}
			for _, got := range [][]byte{raw, app} {
				for _, bad := range []string{marker, "the-code-marker", secret, "PRI * HTTP/2.0", "x-codeinterp", "Run"} {
					if bytes.Contains(got, []byte(bad)) {
						t.Fatalf("the listener received %q", bad)
					}
				}
			}
			if len(app) != 0 {
				t.Fatalf("a handshake with the listener completed and it read %d bytes", len(app))
			}
			if got := a.runs(); len(got) != 0 {
				t.Fatalf("A ran %q", got)
			}
			if tc.tls != nil {
				// Exactly one clear warning naming the address.
				ws := logs.FilterMessageSnippet("different cluster key").All()
				if len(ws) != 1 || ws[0].ContextMap()["addr"] != rec.lis.Addr().String() {
					t.Fatalf("warnings: %v, want one naming %s", logs.All(), rec.lis.Addr())
				}
			}
		})
	}
}

// TestSameKeyBothWaysOtherKeyNeither: replicas with the same secret
// forward to each other both ways; one with another secret reaches
// neither, and neither reaches it.
func TestSameKeyBothWaysOtherKeyNeither(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 10*time.Second), startReplica(t, url, secret, 10*time.Second)
	core, logs := observer.New(zap.WarnLevel)
	c := startReplicaLog(t, url, "another-secret-of-another-cluster", 10*time.Second, zap.New(core))
	claim(t, a.node, "cntr_a")
	claim(t, b.node, "cntr_b")
	claim(t, c.node, "cntr_c")
	forward := func(from *replica, key string) ([]byte, error) {
		l, mine := claim(t, from.node, key)
		if mine {
			t.Fatalf("%s: the claim took another's lease", key)
		}
		return from.node.Forward(context.Background(), key, l, []byte("x"), nil)
	}
	if out, err := forward(b, "cntr_a"); err != nil || string(out) != "ran x" {
		t.Fatalf("B to A: %q %v", out, err)
	}
	if out, err := forward(a, "cntr_b"); err != nil || string(out) != "ran x" {
		t.Fatalf("A to B: %q %v", out, err)
	}
	for _, f := range []struct {
		name string
		from *replica
		key  string
	}{{"C to A", c, "cntr_a"}, {"C to B", c, "cntr_b"}, {"A to C", a, "cntr_c"}, {"C to A again", c, "cntr_a"}} {
		if _, err := forward(f.from, f.key); !errors.Is(err, cluster.ErrUnreachable) || !strings.Contains(err.Error(), "different cluster key") {
			t.Fatalf("%s: %v, want ErrUnreachable (a different cluster key)", f.name, err)
		}
	}
	if len(a.runs()) != 1 || len(b.runs()) != 1 || len(c.runs()) != 0 {
		t.Fatalf("runs: A %q, B %q, C %q", a.runs(), b.runs(), c.runs())
	}
	// C warned once per address, not once per run.
	if n := logs.FilterMessageSnippet("different cluster key").Len(); n != 2 {
		t.Fatalf("C logged %d warnings, want 2 (one per address): %v", n, logs.All())
	}
}

// TestUnauthenticatedFloodIsBounded: a client without the key sends 200 MB
// and opens 1 000 connections to the cluster port (plaintext HTTP/2,
// garbage, TLS with another key, idle). The server reads nothing gRPC
// before a handshake that proves the key, so its memory stays bounded;
// it still serves an authenticated run afterwards.
func TestUnauthenticatedFloodIsBounded(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 10*time.Second), startReplica(t, url, secret, 10*time.Second)
	claim(t, a.node, "cntr_1")
	l, _ := claim(t, b.node, "cntr_1")
	addr := a.node.Addr()

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	deadline := time.Now().Add(30 * time.Second)
	junk := bytes.Repeat([]byte{0x16, 0x03, 0x01, 0xff, 0xff}, 1<<18/5) // 256 KiB of "handshake records"
	h2 := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00)
	other := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{selfSigned(t)}, MinVersion: tls.VersionTLS13} //nolint:gosec // the attacker's side
	// 1 000 connections, held open together.
	var conns []net.Conn
	var handshakes sync.WaitGroup
	for i := range 1000 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(deadline)
		switch i % 4 {
		case 0: // a plaintext gRPC client
			_, _ = c.Write(h2)
		case 1: // garbage
			_, _ = c.Write(junk[:4096])
		case 2: // TLS with another key
			handshakes.Add(1)
			go func() {
				defer handshakes.Done()
				tc := tls.Client(c, other)
				if tc.Handshake() == nil {
					// The server has the last word in TLS 1.3 client
					// authentication: a write after it is refused.
					_, _ = tc.Write(h2)
					_, _ = tc.Read(make([]byte, 1))
				}
			}()
		case 3: // idle
		}
	}
	// 200 MB, as fast as the server takes it.
	var sent int64
	for dials := 0; sent < 200<<20 && dials < 5000 && time.Now().Before(deadline); dials++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(deadline)
		for sent < 200<<20 {
			n, err := c.Write(junk)
			sent += int64(n)
			if err != nil {
				break
			}
		}
		_ = c.Close()
	}
	handshakes.Wait()
	close(stop)
	<-sampled
	for _, c := range conns {
		_ = c.Close()
	}
	t.Logf("sent %d MB to the cluster port; heap in use %d MiB before, at most %d MiB during",
		sent>>20, base>>20, peak.Load()>>20)
	if grown := int64(peak.Load()) - int64(base); grown > 64<<20 {
		t.Fatalf("the heap grew by %d MiB under an unauthenticated flood", grown>>20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := b.node.Forward(ctx, "cntr_1", l, []byte("after"), nil); err != nil || string(out) != "ran after" {
		t.Fatalf("an authenticated run after the flood: %q %v", out, err)
	}
	if got := a.runs(); len(got) != 1 {
		t.Fatalf("A ran %q", got)
	}
}
