package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestSkillsConformance runs the shared Skills suite on one real
// redis-server, each store under a key prefix of its own.
func TestSkillsConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.RunSkills(t, func(t *testing.T, l store.SkillLimits, now func() time.Time) store.Skills {
		s, err := redis.NewSkills(context.Background(), url, l, now, redis.WithPrefix(fmt.Sprintf("s%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
