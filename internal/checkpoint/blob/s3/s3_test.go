package s3_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

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
	if _, err := st.Get(ctx, "o/c/1"); err == nil || errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get with the server down: %v, want an error other than ErrNotFound", err)
	}
	if err := st.Put(ctx, "o/c/2", []byte("x")); err == nil {
		t.Fatal("Put with the server down succeeded")
	}
}
