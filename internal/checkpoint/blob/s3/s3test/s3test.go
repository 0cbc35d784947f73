// Package s3test starts a real S3-compatible server for tests: versitygw
// (runtime/build-versitygw.sh, `make s3-server`) serving a temporary
// directory on a loopback port. It never substitutes a mock and never
// skips: without versitygw the test fails and says how to build it.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	stop      func()
}

// Stop kills the server (a store whose server went away).
func (s *Server) Stop(tb testing.TB) { s.stop() }

// Binary finds versitygw: $CODEINTERP_VERSITYGW, else where
// runtime/build-versitygw.sh builds it.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("CODEINTERP_VERSITYGW"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "..", "runtime", "build-versitygw.sh")
	out, err := exec.Command("bash", script, "--print-path").Output()
	if err != nil {
		tb.Fatalf("s3test: %s --print-path: %v", script, err)
	}
	p := strings.TrimSpace(string(out))
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
		tb.Fatalf("s3test: the S3 tests need versitygw at %s (%v): run `make s3-server` (make test does)", p, err)
	}
	return p
}

// Start starts versitygw on a temporary directory and stops it when the
// test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := Binary(tb)
	root := tb.TempDir()
	s := &Server{AccessKey: "codeinterp" + randHex(4), SecretKey: randHex(16)}
	// A free port: versitygw takes an address, not a listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s.Endpoint = "http://" + addr
	cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "posix", root)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("s3test: starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	tb.Cleanup(s.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-exited:
			tb.Fatalf("s3test: versitygw exited: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("s3test: versitygw did not answer on %s within 30s: %v\n%s", addr, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Bucket makes a new bucket through the S3 API and returns its name.
func (s *Server) Bucket(tb testing.TB) string {
	tb.Helper()
	u, _ := url.Parse(s.Endpoint)
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		tb.Fatal(err)
	}
	name := "ckpt-" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		tb.Fatalf("s3test: make bucket %s: %v", name, err)
	}
	return name
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
