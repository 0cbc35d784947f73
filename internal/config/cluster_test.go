package config

import (
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
