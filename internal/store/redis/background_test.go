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

// TestBackgroundConformance runs the shared Background suite on one real
// redis-server, each store under a key prefix of its own.
func TestBackgroundConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.RunBackground(t, func(t *testing.T, now func() time.Time) store.Background {
		b, err := redis.NewBackground(context.Background(), url, now, redis.WithPrefix(fmt.Sprintf("b%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}
