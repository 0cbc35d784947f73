package config

import (
	"net/url"
	"time"
)

// Checkpoints keeps containers' interpreter state (variables, imports,
// /tmp) beyond the process holding it: before an eviction, once a
// container has been idle After, and when the server stops, sealed with
// AES-256-GCM and bound to the owner and container (package checkpoint).
// The next run of the container, on this server after an eviction or a
// restart, or on a replica sharing the store, restores it. Both
// providers: on gVisor the whole sandbox (runsc checkpoint), except
// sessions with a network_policy; After defaults to 10s there
// (ApplyProviderDefaults).
type Checkpoints struct {
	Enabled bool `json:"enabled"`
	// After is how long an interpreter that ran code stays idle before it
	// is checkpointed in the background (0: only before an eviction and on
	// shutdown). A kill -9 loses at most the turns of the last After.
	After time.Duration `json:"after"`
	// TTL is how long a checkpoint is kept after it was written, and a
	// snapshot kept as a checkpoint's base twice that (the server sweeps
	// its store hourly; with s3, a bucket lifecycle rule can do it
	// instead). Containers expire long before (20 minutes idle by
	// default; api.max_expiry at most): a checkpoint older than its
	// container is never restored.
	TTL time.Duration `json:"ttl"`
	// MaxBytes bounds one checkpoint; a larger state is not kept (the next
	// interpreter starts fresh and the model is told).
	MaxBytes ByteSize `json:"max_bytes"`
	// Key is the base64 of a 32-byte key (openssl rand -base64 32), the
	// same on every replica: from a Secret through
	// CODEINTERP_CHECKPOINTS_KEY. Empty: KeyFile.
	Key string `json:"key"`
	// KeyFile is a key file made on first start (mode 0600) when Key is
	// empty: for one host. Empty: checkpoint.key in the build cache's root.
	KeyFile string `json:"key_file"`
	// Store is dir (a directory: one host, or a volume every replica
	// mounts) or s3 (S3-compatible object storage).
	Store string `json:"store"`
	// Dir is the dir store's root. Empty: checkpoints/ in the build
	// cache's root.
	Dir string        `json:"dir"`
	S3  CheckpointsS3 `json:"s3"`
}

// CheckpointsS3 is the s3 store (checkpoint/blob/s3).
type CheckpointsS3 struct {
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	Prefix   string `json:"prefix"`
	Region   string `json:"region"`
	// AccessKey and SecretKey: both empty takes the environment's and the
	// instance's credentials (AWS_*, IRSA, instance metadata).
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	PathStyle bool   `json:"path_style"`
}

func defaultCheckpoints() Checkpoints {
	return Checkpoints{Enabled: true, After: 2 * time.Second, TTL: 24 * time.Hour, MaxBytes: 64 << 20, Store: "dir"}
}

func (c *Config) validateCheckpoints(v *validator) {
	k := c.Checkpoints
	if !k.Enabled {
		return
	}
	v.check(k.After >= 0, "checkpoints.after", "must not be negative")
	v.check(k.MaxBytes > 0, "checkpoints.max_bytes", "must be positive")
	v.check(k.TTL >= time.Hour, "checkpoints.ttl", "%s is less than an hour", k.TTL)
	// (An api.max_expiry out of its own range is said once, there.)
	v.check(k.TTL >= c.API.MaxExpiry || c.API.MaxExpiry > 30*24*time.Hour, "checkpoints.ttl", "%s is shorter than api.max_expiry %s: a container idle that long would lose its checkpoint", k.TTL, c.API.MaxExpiry)
	switch k.Store {
	case "dir":
	case "s3":
		u, err := url.Parse(k.S3.Endpoint)
		v.check(err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "", "checkpoints.s3.endpoint",
			"%q is not an http(s)://host[:port] URL", k.S3.Endpoint)
		v.check(k.S3.Bucket != "", "checkpoints.s3.bucket", "is required with store: s3")
		v.check((k.S3.AccessKey == "") == (k.S3.SecretKey == ""), "checkpoints.s3.access_key",
			"access_key and secret_key go together (both empty: the environment's credentials)")
	default:
		v.add("checkpoints.store", "%q is not one of dir, s3", k.Store)
	}
}
