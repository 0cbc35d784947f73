// Package s3 is a blob.Store in S3-compatible object storage (AWS S3,
// MinIO, Ceph RGW, SeaweedFS, versitygw, GCS's XML API…), through
// minio-go: the store for several replicas.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
)

// Config says where the blobs go.
type Config struct {
	// Endpoint is the server's URL: https://s3.eu-west-1.amazonaws.com,
	// http://minio.storage:9000. Only http and https.
	Endpoint string
	Bucket   string
	// Prefix is prepended to every key (e.g. "codeinterp/checkpoints/").
	Prefix string
	Region string
	// AccessKey and SecretKey are static credentials. Both empty: the
	// environment and the instance's role (AWS_* variables, IRSA's web
	// identity, EC2/ECS metadata), in the usual order.
	AccessKey, SecretKey string
	// PathStyle addresses the bucket in the path rather than the host
	// name (most S3-compatible servers want it).
	PathStyle bool
}

// Store keeps each blob as one object.
type Store struct {
	c      *minio.Client
	bucket string
	prefix string
}

var _ blob.Store = (*Store)(nil)

// New returns a Store on cfg's bucket, which must exist (the server never
// creates buckets: their policy and lifecycle are the operator's).
func New(ctx context.Context, cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("blob s3: endpoint %q is not an http(s)://host[:port] URL", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("blob s3: no bucket")
	}
	if cfg.Prefix != "" {
		if err := blob.CheckPrefix(cfg.Prefix); err != nil {
			return nil, fmt.Errorf("blob s3: prefix: %w", err)
		}
	}
	var creds *credentials.Credentials
	switch {
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	case cfg.AccessKey == "" && cfg.SecretKey == "":
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{},
			&credentials.IAM{}, // web identity (IRSA), ECS and EC2 metadata
		})
	default:
		return nil, errors.New("blob s3: an access key without a secret key, or the reverse")
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region, BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("blob s3: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("blob s3: bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("blob s3: bucket %s does not exist at %s", cfg.Bucket, cfg.Endpoint)
	}
	s := &Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}
	if err := s.checkConditional(ctx); err != nil {
		return nil, fmt.Errorf("blob s3: %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	return s, nil
}

// checkConditional makes sure the server evaluates conditional writes
// rather than ignoring their headers (a server that ignores them makes
// every PutIf succeed, and checkpoints unfenced): a create-only write of
// a new probe object succeeds, a second one and one on another ETag fail.
// Three PUTs and a DELETE under the prefix, at start.
func (s *Store) checkConditional(ctx context.Context) error {
	var id [8]byte
	_, _ = rand.Read(id[:])
	key := "codeinterp-probe/" + hex.EncodeToString(id[:])
	if _, err := s.PutIf(ctx, key, []byte("probe"), ""); err != nil {
		return fmt.Errorf("conditional write (If-None-Match: *) of a new object: %w", err)
	}
	defer func() { _ = s.Delete(context.WithoutCancel(ctx), key) }()
	for _, ifMatch := range []string{"", "00000000000000000000000000000000"} {
		_, err := s.PutIf(ctx, key, []byte("again"), ifMatch)
		switch {
		case err == nil:
			return errors.New("the server ignores conditional writes (If-Match / If-None-Match): checkpoints could not be fenced; it needs a server that implements them (AWS S3, versitygw, MinIO, …)")
		case !errors.Is(err, blob.ErrPrecondition):
			return fmt.Errorf("conditional write of an object that exists: %w", err)
		}
	}
	return nil
}

// Put uploads data as key's object; S3 replaces an object whole.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true})
	if err != nil {
		return fmt.Errorf("blob s3: put %s: %w", key, err)
	}
	return nil
}

// Get downloads key's object, at most max bytes of it.
func (s *Store) Get(ctx context.Context, key string, max int64) ([]byte, error) {
	b, _, err := s.get(ctx, key, max)
	return b, err
}

// GetVersion downloads key's object, at most max bytes of it, and its
// ETag, from one response.
func (s *Store) GetVersion(ctx context.Context, key string, max int64) ([]byte, string, error) {
	return s.get(ctx, key, max)
}

func (s *Store) get(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := blob.CheckKey(key); err != nil {
		return nil, "", err
	}
	if max <= 0 {
		return nil, "", fmt.Errorf("blob s3: get %s: a bound of %d bytes", key, max)
	}
	// One GET: the size and ETag are those of the bytes read. (minio-go's
	// Object would ask again, with If-Match, for reads after its Stat: a
	// Put in between fails that read.)
	obj, info, _, err := minio.Core{Client: s.c}.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", s.getErr(key, err)
	}
	defer obj.Close()
	if info.Size > max {
		return nil, "", fmt.Errorf("%w: %s is %d bytes, the bound %d", blob.ErrTooLarge, key, info.Size, max)
	}
	var buf bytes.Buffer
	if info.Size > 0 {
		buf.Grow(int(info.Size) + 1)
	}
	if _, err := buf.ReadFrom(io.LimitReader(obj, max+1)); err != nil {
		return nil, "", s.getErr(key, err)
	}
	if int64(buf.Len()) > max {
		return nil, "", fmt.Errorf("%w: %s is above the bound %d", blob.ErrTooLarge, key, max)
	}
	return buf.Bytes(), info.ETag, nil
}

func (s *Store) getErr(key string, err error) error {
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return fmt.Errorf("%w: %s", blob.ErrNotFound, key)
	}
	return fmt.Errorf("blob s3: get %s: %w", key, err)
}

var _ blob.Conditional = (*Store)(nil)

// PutIf uploads data as key's object with If-Match: <ifMatch>, or with
// If-None-Match: * when ifMatch is "" (S3 conditional writes; the server
// evaluates the condition and publishes the object atomically). A 412
// Precondition Failed, a 409 ConditionalRequestConflict (another write of
// the key was under way) and, for If-Match, a missing key (versitygw
// answers NoSuchKey) are ErrPrecondition. One PUT, never multipart: the
// condition must hold for the whole write.
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if err := blob.CheckKey(key); err != nil {
		return "", err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true, DisableMultipart: true}
	if ifMatch == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(ifMatch)
	}
	info, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		resp := minio.ToErrorResponse(err)
		switch {
		case resp.StatusCode == http.StatusPreconditionFailed, resp.Code == "PreconditionFailed",
			resp.StatusCode == http.StatusConflict, resp.Code == "ConditionalRequestConflict",
			ifMatch != "" && resp.Code == minio.NoSuchKey:
			return "", fmt.Errorf("%w: put %s: %s", blob.ErrPrecondition, key, resp.Code)
		case resp.Code == "NotImplemented":
			return "", fmt.Errorf("blob s3: put %s: the server does not implement conditional writes (%w): checkpoints cannot be fenced on it", key, err)
		}
		return "", fmt.Errorf("blob s3: put %s: %w", key, err)
	}
	if info.ETag == "" {
		return "", fmt.Errorf("blob s3: put %s: the server returned no ETag", key)
	}
	return info.ETag, nil
}

// Delete removes key's object (S3 answers a missing key with success).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("blob s3: delete %s: %w", key, err)
	}
	return nil
}

// DeletePrefix lists the objects under prefix and removes them in
// batches.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if err := blob.CheckPrefix(prefix); err != nil {
		return err
	}
	if _, err := s.removeListed(ctx, prefix, func(minio.ObjectInfo) bool { return true }); err != nil {
		return fmt.Errorf("blob s3: delete %s*: %w", prefix, err)
	}
	return nil
}

var _ blob.Sweeper = (*Store)(nil)

// Sweep removes the objects under prefix last modified before cutoff.
func (s *Store) Sweep(ctx context.Context, prefix string, cutoff time.Time, skip func(string) bool) (int, error) {
	if err := blob.CheckPrefix(prefix); err != nil {
		return 0, err
	}
	return s.removeListed(ctx, prefix, func(o minio.ObjectInfo) bool {
		return o.LastModified.Before(cutoff) && (skip == nil || !skip(strings.TrimPrefix(o.Key, s.prefix)))
	})
}

// removeListed lists the objects under prefix, removes in batches those
// remove selects, and reports how many went.
func (s *Store) removeListed(ctx context.Context, prefix string, remove func(minio.ObjectInfo) bool) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var listErr error
	listed := 0 // written by the lister; read after it closed selected
	selected := make(chan minio.ObjectInfo)
	go func() {
		defer close(selected)
		for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			// ListObjects matches the prefix as a string; a key's own
			// segments end at '/', which the prefix ends with.
			if !strings.HasPrefix(o.Key, s.prefix+prefix) || !remove(o) {
				continue
			}
			listed++
			select {
			case selected <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	failed := 0
	var firstErr error
	for r := range s.c.RemoveObjects(ctx, s.bucket, selected, minio.RemoveObjectsOptions{}) {
		failed++
		if firstErr == nil {
			firstErr = r.Err
		}
	}
	if firstErr == nil {
		firstErr = listErr
	}
	return listed - failed, firstErr
}
