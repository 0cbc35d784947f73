package config

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Cluster)
		want   string // the field named; "" for valid
	}{
		{"defaults", func(*Cluster) {}, ""},
		{"off ignores the rest", func(k *Cluster) { k.Enabled, k.Listen = false, "nowhere" }, ""},
		{"kubernetes", func(k *Cluster) { k.Listen, k.Advertise = ":9003", "10.0.0.7:9003" }, ""},
		{"listen not host:port", func(k *Cluster) { k.Listen = "9003" }, "cluster.listen"},
		{"advertise without a port", func(k *Cluster) { k.Advertise = "10.0.0.7" }, "cluster.advertise"},
		{"advertise port 0", func(k *Cluster) { k.Advertise = "10.0.0.7:0" }, "cluster.advertise"},
		{"short secret", func(k *Cluster) { k.Secret = "short" }, "cluster.secret"},
		{"lease_ttl too short", func(k *Cluster) { k.LeaseTTL = 100 * time.Millisecond }, "cluster.lease_ttl"},
		{"lease_ttl too long", func(k *Cluster) { k.LeaseTTL = time.Hour }, "cluster.lease_ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c.Cluster)
			err := c.Validate()
			var fe *FieldError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.want != "" && (!errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestClusterSecret: every replica must compute the same secret from what
// they share, and nothing a pod keeps alone (a key file) may feed it.
func TestClusterSecret(t *testing.T) {
	env := func(string) (string, bool) { return t.TempDir(), true }
	with := func(change func(*Config)) string {
		t.Helper()
		c := Default()
		change(c)
		s, err := c.ClusterSecret(env)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	key := func(b byte) string {
		k := make([]byte, 32)
		k[0] = b
		return base64.StdEncoding.EncodeToString(k)
	}
	if s := with(func(c *Config) { c.Cluster.Secret = "set-by-the-operator" }); s != "set-by-the-operator" {
		t.Fatalf("cluster.secret not used: %q", s)
	}
	a1 := with(func(c *Config) { c.Checkpoints.Key = key(1) })
	a2 := with(func(c *Config) { c.Checkpoints.Key = key(1) })
	b := with(func(c *Config) { c.Checkpoints.Key = key(2) })
	if a1 == "" || a1 != a2 || a1 == b || strings.Contains(a1, key(1)) {
		t.Fatalf("derived secrets: %q, %q, %q; want equal for one key, another for another, not the key", a1, a2, b)
	}
	if s := with(func(*Config) {}); s != "" {
		t.Fatalf("with only a key file: %q, want none (Redis keeps one)", s)
	}
	if s := with(func(c *Config) { c.Checkpoints.Enabled, c.Checkpoints.Key = false, key(1) }); s != "" {
		t.Fatalf("with checkpoints off: %q, want none", s)
	}
}
