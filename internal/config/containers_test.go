package config

import (
	"testing"
	"time"
)

// TestRestoreExpiredLimits: containers.restore_expired keeps an expired
// container's files checkpoints.ttl for the store, and the store remembers
// it as long again after; off, nothing is kept (OpenAI's behaviour).
func TestRestoreExpiredLimits(t *testing.T) {
	c := Default()
	if l := c.StoreLimits(); l.ExpiredKeep != 0 || l.ExpiredMemory != c.Store.Limits.ExpiredMemory {
		t.Fatalf("default: keep %s, memory %s; want nothing kept", l.ExpiredKeep, l.ExpiredMemory)
	}
	c.Containers.RestoreExpired = true
	c.Checkpoints.TTL = 7 * 24 * time.Hour
	l := c.StoreLimits()
	if l.ExpiredKeep != 7*24*time.Hour || l.ExpiredMemory != 7*24*time.Hour+c.Store.Limits.ExpiredMemory {
		t.Fatalf("restore_expired: keep %s, memory %s", l.ExpiredKeep, l.ExpiredMemory)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
