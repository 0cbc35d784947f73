package config

import (
	"net"
	"time"
)

// Cluster gives each container one holder among the replicas sharing a
// Redis store (package cluster): a lease in Redis names the replica whose
// interpreter runs the container's code, and a run arriving on another
// replica is forwarded to it over an internal gRPC listener. With
// store.backend memory there is one replica and nothing to share.
type Cluster struct {
	// Enabled turns leases and forwarding on with store.backend redis.
	Enabled bool `json:"enabled"`
	// Listen is the internal listener for runs other replicas forward
	// (host:port). The default serves one host (a free loopback port);
	// Kubernetes sets ":9003" and lets only replicas reach it.
	Listen string `json:"listen"`
	// Advertise is the address other replicas reach Listen at. Empty:
	// Listen's bound address (127.0.0.1 for an unspecified host).
	// Kubernetes sets "$(POD_IP):9003".
	Advertise string `json:"advertise"`
	// Secret authenticates forwarded runs, the same on every replica (a
	// Secret through CODEINTERP_CLUSTER_SECRET), at least 16 characters.
	// Empty: derived from checkpoints.key when it is set, else made once
	// and kept in Redis (a Redis restarted without its data gives
	// replicas started after it another: set one for that case).
	Secret string `json:"secret"`
	// LeaseTTL is how long a holder's lease lasts unrenewed: after a
	// kill -9, the longest another replica may wait before it takes the
	// container over without having found the holder gone.
	LeaseTTL time.Duration `json:"lease_ttl"`
}

func defaultCluster() Cluster {
	return Cluster{Enabled: true, Listen: "127.0.0.1:0", LeaseTTL: 10 * time.Second}
}

// ClusterActive reports whether leases and forwarding are on: enabled,
// over a store replicas share.
func (c *Config) ClusterActive() bool {
	return c.Cluster.Enabled && c.Store.Backend == StoreRedis
}

func (c *Config) validateCluster(v *validator) {
	k := c.Cluster
	if !k.Enabled {
		return
	}
	_, _, err := net.SplitHostPort(k.Listen)
	v.check(err == nil, "cluster.listen", "%q is not host:port", k.Listen)
	if k.Advertise != "" {
		h, p, err := net.SplitHostPort(k.Advertise)
		v.check(err == nil && h != "" && p != "" && p != "0", "cluster.advertise", "%q is not host:port", k.Advertise)
	}
	v.check(k.Secret == "" || len(k.Secret) >= 16, "cluster.secret", "is shorter than 16 characters")
	v.check(k.LeaseTTL >= time.Second && k.LeaseTTL <= 5*time.Minute, "cluster.lease_ttl", "%s is not between 1s and 5m", k.LeaseTTL)
}
