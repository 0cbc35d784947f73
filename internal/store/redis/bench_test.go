package redis_test

import (
	"context"
	"testing"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// BenchmarkResponses is storetest's benchmark over a real redis-server on
// loopback (one round trip per lookup).
func BenchmarkResponses(b *testing.B) {
	rs, err := redis.NewResponses(context.Background(), redistest.Start(b), store.DefaultResponseLimits(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rs.Close() })
	storetest.BenchmarkResponses(b, rs)
}
