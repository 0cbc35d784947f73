package config

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func TestValidateCheckpoints(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		name   string
		change func(*Checkpoints)
		want   string // the field named; "" for valid
	}{
		{"defaults", func(*Checkpoints) {}, ""},
		{"off ignores the rest", func(k *Checkpoints) { k.Enabled, k.Store = false, "tape" }, ""},
		{"s3", func(k *Checkpoints) { k.Store, k.S3.Endpoint, k.S3.Bucket = "s3", "https://s3.example.com", "b" }, ""},
		{"unknown store", func(k *Checkpoints) { k.Store = "tape" }, "checkpoints.store"},
		{"s3 without a bucket", func(k *Checkpoints) { k.Store, k.S3.Endpoint = "s3", "https://s3.example.com" }, "checkpoints.s3.bucket"},
		{"s3 endpoint not a URL", func(k *Checkpoints) { k.Store, k.S3.Endpoint, k.S3.Bucket = "s3", "s3.example.com", "b" }, "checkpoints.s3.endpoint"},
		{"s3 key without secret", func(k *Checkpoints) {
			k.Store, k.S3.Endpoint, k.S3.Bucket, k.S3.AccessKey = "s3", "https://s3.example.com", "b", "AK"
		}, "checkpoints.s3.access_key"},
		{"negative after", func(k *Checkpoints) { k.After = -1 }, "checkpoints.after"},
		{"zero max_bytes", func(k *Checkpoints) { k.MaxBytes = 0 }, "checkpoints.max_bytes"},
		{"ttl under an hour", func(k *Checkpoints) { k.TTL = time.Minute }, "checkpoints.ttl"},
		{"a key", func(k *Checkpoints) { k.Key = key }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c.Checkpoints)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
