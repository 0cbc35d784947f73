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

func TestUsageConformance(t *testing.T) {
	url := redistest.Start(t)
	storetest.RunUsage(t, func(t *testing.T, now func() time.Time) store.Usage {
		u, err := redis.NewUsage(context.Background(), url, now, redis.WithPrefix("u:"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = u.Close() })
		return u
	})
}
