package redis_test

import (
	"context"
	"testing"
	"time"

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

// BenchmarkBackgroundAppend is one streamed event kept (a token delta):
// its bytes accounted in the server-wide bound, then appended to its log.
func BenchmarkBackgroundAppend(b *testing.B) {
	ctx := context.Background()
	bg, err := redis.NewBackground(ctx, redistest.Start(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bg.Close() })
	if err := bg.Begin(ctx, "o", "resp_bench", 0, 0, time.Hour, time.Hour); err != nil {
		b.Fatal(err)
	}
	event := []byte(`{"type":"response.output_text.delta","sequence_number":0,"delta":"token"}`)
	b.ResetTimer()
	for i := range b.N {
		if err := bg.AppendEvent(ctx, "o", "resp_bench", int64(i), event); err != nil {
			b.Fatal(err)
		}
	}
}
