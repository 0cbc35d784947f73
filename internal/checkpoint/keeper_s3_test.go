package checkpoint_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3/s3test"
)

// TestKeeperRacingSavesS3: testRacingSaves on S3-compatible storage (a
// real versitygw: the head's compare-and-set is the server's conditional
// write). Without versitygw this fails and says how to build it.
func TestKeeperRacingSavesS3(t *testing.T) {
	srv := s3test.Start(t)
	const prefix = "codeinterp/checkpoints/"
	testRacingSaves(t, func(t *testing.T) racingStore {
		bucket := srv.Bucket(t)
		st, err := s3.New(context.Background(), s3.Config{
			Endpoint: srv.Endpoint, Bucket: bucket, Prefix: prefix,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(srv.Endpoint)
		c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
		if err != nil {
			t.Fatal(err)
		}
		return racingStore{store: st, keys: func(t *testing.T, under string) []string {
			var keys []string
			for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix + under, Recursive: true}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				keys = append(keys, strings.TrimPrefix(o.Key, prefix))
			}
			return keys
		}}
	})
}
