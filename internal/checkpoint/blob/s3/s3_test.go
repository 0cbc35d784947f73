package s3_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/blobtest"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3/s3test"
)

// TestConformance runs the blob suite against a real S3-compatible server
// (versitygw), a bucket per subtest, under a key prefix as deployments
// use one.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		st, err := s3.New(context.Background(), s3.Config{
			Endpoint: srv.Endpoint, Bucket: srv.Bucket(t), Prefix: "codeinterp/checkpoints/",
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// TestNewRefuses: bad settings, a missing bucket, wrong credentials and a
// server that is down are errors at start, not at the first checkpoint.
func TestNewRefuses(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	good := s3.Config{Endpoint: srv.Endpoint, Bucket: bucket, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true}
	for _, tc := range []struct {
		name   string
		change func(*s3.Config)
		want   string
	}{
		{"endpoint not a URL", func(c *s3.Config) { c.Endpoint = "s3.example.com" }, "not an http(s)"},
		{"endpoint with a path", func(c *s3.Config) { c.Endpoint += "/bucket" }, "not an http(s)"},
		{"no bucket", func(c *s3.Config) { c.Bucket = "" }, "no bucket"},
		{"bad prefix", func(c *s3.Config) { c.Prefix = "../x/" }, "prefix"},
		{"secret without key", func(c *s3.Config) { c.AccessKey = "" }, "access key without"},
		{"missing bucket", func(c *s3.Config) { c.Bucket = "no-such-bucket" }, "does not exist"},
		{"wrong secret", func(c *s3.Config) { c.SecretKey = "wrong" }, bucket},
		{"server down", func(c *s3.Config) { c.Endpoint = down }, "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.change(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := s3.New(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := s3.New(context.Background(), good); err != nil {
		t.Fatalf("the good settings: %v", err)
	}
}

// TestServerDownAfterStart: a store whose server went away answers with
// an error, never ErrNotFound (which would read as "no checkpoint").
func TestServerDownAfterStart(t *testing.T) {
	srv := s3test.Start(t)
	st, err := s3.New(context.Background(), s3.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket(t),
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Put(ctx, "o/c/1", []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := st.Get(ctx, "o/c/1", 1<<20); err == nil || errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get with the server down: %v, want an error other than ErrNotFound", err)
	}
	if err := st.Put(ctx, "o/c/2", []byte("x")); err == nil {
		t.Fatal("Put with the server down succeeded")
	}
}

// TestServerConditionalWrites pins what the pinned versitygw answers to
// S3 conditional writes (PutObject with If-Match / If-None-Match), which
// PutIf relies on, through the client PutIf uses: a versitygw upgrade
// that changes any answer fails here first.
func TestServerConditionalWrites(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	u, _ := url.Parse(srv.Endpoint)
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key, data string, set func(*minio.PutObjectOptions)) (string, minio.ErrorResponse) {
		opts := minio.PutObjectOptions{DisableMultipart: true, SendContentMd5: true}
		if set != nil {
			set(&opts)
		}
		info, err := c.PutObject(ctx, bucket, key, strings.NewReader(data), int64(len(data)), opts)
		return info.ETag, minio.ToErrorResponse(err)
	}
	answer := func(name string, r minio.ErrorResponse, status int, code string) {
		t.Helper()
		t.Logf("%s: %d %s", name, r.StatusCode, r.Code)
		if r.StatusCode != status || r.Code != code {
			t.Errorf("%s: %d %q, want %d %q", name, r.StatusCode, r.Code, status, code)
		}
	}
	etag1, r := put("k", "one", func(o *minio.PutObjectOptions) { o.SetMatchETagExcept("*") })
	answer("If-None-Match: * on a new key", r, 0, "")
	_, r = put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETagExcept("*") })
	answer("If-None-Match: * on a key that exists", r, http.StatusPreconditionFailed, "PreconditionFailed")
	_, r = put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETag("0123456789abcdef0123456789abcdef") })
	answer("If-Match: another ETag", r, http.StatusPreconditionFailed, "PreconditionFailed")
	_, r = put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETag("*") })
	answer("If-Match: * on a key that exists", r, http.StatusPreconditionFailed, "PreconditionFailed")
	_, r = put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETagExcept(etag1) })
	answer("If-None-Match: <ETag>", r, http.StatusNotImplemented, "NotImplemented")
	_, r = put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETag(etag1); o.SetMatchETagExcept("*") })
	answer("If-Match and If-None-Match together", r, http.StatusNotImplemented, "NotImplemented")
	_, r = put("missing", "two", func(o *minio.PutObjectOptions) { o.SetMatchETag(etag1) })
	answer("If-Match on a missing key", r, http.StatusNotFound, minio.NoSuchKey)
	etag2, r := put("k", "two", func(o *minio.PutObjectOptions) { o.SetMatchETag(etag1) })
	answer("If-Match: the current ETag", r, 0, "")
	if etag2 == "" || etag2 == etag1 {
		t.Errorf("the ETag after a conditional write: %q (before %q)", etag2, etag1)
	}
	// Racing writes on one ETag: exactly one wins, the others 412 (no
	// 409 ConditionalRequestConflict from versitygw's posix backend: it
	// takes a lock around the check and the publication).
	const n = 12
	answers := make([]minio.ErrorResponse, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, answers[i] = put("k", fmt.Sprint("racer ", i), func(o *minio.PutObjectOptions) { o.SetMatchETag(etag2) })
		}()
	}
	close(start)
	wg.Wait()
	won, lost := 0, map[string]int{}
	for _, r := range answers {
		if r.StatusCode == 0 {
			won++
		} else {
			lost[fmt.Sprint(r.StatusCode, " ", r.Code)]++
		}
	}
	t.Logf("%d writes racing on one ETag: %d won, lost %v", n, won, lost)
	if won != 1 || len(lost) != 1 || lost["412 PreconditionFailed"] != n-1 {
		t.Errorf("%d writes racing on one ETag: %d won, lost %v; want 1 won, %d lost with 412 PreconditionFailed", n, won, lost, n-1)
	}
}

// TestNewRefusesUnconditionalServer: a server that ignores If-Match and
// If-None-Match (accepts every write) would leave checkpoints unfenced:
// New refuses it. (A stand-in server: no real one at hand ignores them.)
func TestNewRefusesUnconditionalServer(t *testing.T) {
	var puts []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			mu.Lock()
			puts = append(puts, r.Header.Get("If-Match")+r.Header.Get("If-None-Match"))
			mu.Unlock()
			w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		case http.MethodHead, http.MethodDelete:
		default:
			w.WriteHeader(http.StatusNotImplemented)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	_, err := s3.New(context.Background(), s3.Config{Endpoint: srv.URL, Bucket: "bucket", Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", PathStyle: true})
	if err == nil || !strings.Contains(err.Error(), "ignores conditional writes") {
		t.Fatalf("New on a server that ignores conditional writes: %v", err)
	}
	if len(puts) != 2 || puts[0] != "*" || puts[1] != "*" {
		t.Fatalf("the probe's writes sent %q, want If-None-Match: * twice", puts)
	}
}
