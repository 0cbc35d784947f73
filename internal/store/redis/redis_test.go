package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestConformance runs the shared suite on one real redis-server; each
// store gets its own key prefix, so each test starts from an empty store
// the way it would on a Redis of its own.
func TestConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, l store.Limits, now func() time.Time) store.Store {
		s, err := redis.New(context.Background(), url, l, now, redis.WithPrefix(fmt.Sprintf("t%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func client(t *testing.T, url string) *goredis.Client {
	o, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func keys(t *testing.T, c *goredis.Client, pattern string) []string {
	t.Helper()
	ks, err := c.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestTTLsExpireForReal uses the real clock and short lifetimes: the keys
// of an expired container, its files, an expired Files API file and the
// owner's indexes all vanish from Redis by TTL, with no store call to
// clean up.
func TestTTLsExpireForReal(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	l := store.DefaultLimits()
	// Lifetimes of seconds, with room for a slow shared machine between
	// the writes and the look at their keys.
	l.ExpiredMemory = time.Second
	l.FileLifetime = 5 * time.Second
	s, err := redis.New(ctx, url, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A one-minute container last used 55 seconds ago: it expires within
	// about five seconds.
	now := time.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_real", CreatedAt: now - 55, LastActiveAt: now - 55, ExpiresAfterMinutes: 1}
	if err := s.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	cf, err := s.PutFile(ctx, store.File{Owner: c.Owner, ContainerID: c.ID, Path: "/mnt/data/x"}, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutFile(ctx, store.File{Owner: c.Owner, Filename: "y"}, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if ks := keys(t, rdb, redis.DefaultPrefix+"*"); len(ks) < 7 {
		t.Fatalf("keys after the writes: %v", ks)
	}
	for _, k := range keys(t, rdb, redis.DefaultPrefix+"*") {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 7*time.Second {
			t.Errorf("key %s has TTL %v; want a short positive one", k, ttl)
		}
	}
	// Expired (files gone), then remembered for ExpiredMemory, then gone.
	deadline := time.Now().Add(20 * time.Second)
	sawExpired := false
	for time.Now().Before(deadline) {
		got, err := s.GetContainer(ctx, c.Owner, c.ID)
		if err == nil && got.Expired(time.Now()) {
			sawExpired = true
			_, ferr := s.GetFile(ctx, c.Owner, c.ID, cf.ID)
			if !errors.Is(ferr, store.ErrExpired) {
				// Unless the container's ExpiredMemory ended between the
				// two calls (a loaded machine): then both are not found.
				_, cerr := s.GetContainer(ctx, c.Owner, c.ID)
				if !errors.Is(ferr, store.ErrNotFound) || !errors.Is(cerr, store.ErrNotFound) {
					t.Errorf("file of the expired container: %v (the container now: %v)", ferr, cerr)
				}
			}
		}
		if len(keys(t, rdb, redis.DefaultPrefix+"*")) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ks := keys(t, rdb, redis.DefaultPrefix+"*"); len(ks) != 0 {
		t.Fatalf("keys left after every lifetime ended: %v", ks)
	}
	if !sawExpired {
		t.Error("never saw the container expired-but-remembered")
	}
	_, err = s.GetContainer(ctx, c.Owner, c.ID)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetContainer after ExpiredMemory: %v", err)
	}
}

// TestTouchRefreshesTTLs checks a touch moves the TTL of the container's
// keys and all its files' keys.
func TestTouchRefreshesTTLs(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	clock := storetest.NewClock(storetest.Start())
	l := store.DefaultLimits()
	l.ExpiredMemory = time.Hour
	s, err := redis.New(ctx, url, l, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := clock.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_t", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}
	if err := s.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.PutFile(ctx, store.File{Owner: c.Owner, ContainerID: c.ID, Path: fmt.Sprintf("/mnt/data/%d", i)}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Real time barely moves here: shorten every TTL by hand, as 15
	// minutes of real time would, so only a refresh can restore them.
	clock.Advance(15 * time.Minute)
	for _, k := range keys(t, rdb, redis.DefaultPrefix+"*") {
		rdb.PExpire(ctx, k, 5*time.Minute)
	}
	if _, err := s.TouchContainer(ctx, c.Owner, c.ID, clock.Now()); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys(t, rdb, redis.DefaultPrefix+"*") {
		ttl := rdb.PTTL(ctx, k).Val()
		want := 20 * time.Minute
		if strings.HasSuffix(k, ":c:"+c.ID) || strings.HasSuffix(k, ":containers") {
			want += l.ExpiredMemory
		}
		if ttl < want-time.Minute || ttl > want {
			t.Errorf("after the touch, %s has TTL %v; want about %v", k, ttl, want)
		}
	}
}

// TestTwoReplicas has two stores (two servers) on one Redis: each sees
// and uses what the other made, and quotas hold across both.
func TestTwoReplicas(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	l := store.DefaultLimits()
	l.OwnerContainers = 3
	a, err := redis.New(ctx, url, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redis.New(ctx, url, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_x", Name: "shared", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}
	if err := a.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	f, err := b.PutFile(ctx, store.File{Owner: c.Owner, ContainerID: c.ID, Path: "/mnt/data/from-b"}, []byte("b's bytes"))
	if err != nil {
		t.Fatalf("replica b writes into a's container: %v", err)
	}
	if data, err := a.FileContent(ctx, c.Owner, c.ID, f.ID); err != nil || string(data) != "b's bytes" {
		t.Fatalf("replica a reads b's file: %q, %v", data, err)
	}
	if _, err := b.TouchContainer(ctx, c.Owner, c.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if page, _, err := a.ListContainers(ctx, c.Owner, store.ListOptions{}); err != nil || len(page) != 1 || page[0].ID != c.ID {
		t.Fatalf("replica a lists %+v, %v", page, err)
	}
	// The bound is the owner's, whichever replica is asked.
	for i, s := range []*redis.Store{b, a} {
		if err := s.PutContainer(ctx, store.Container{ID: idgen.New("cntr_"), Owner: c.Owner, CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}); err != nil {
			t.Fatalf("container %d: %v", i+2, err)
		}
	}
	err = b.PutContainer(ctx, store.Container{ID: idgen.New("cntr_"), Owner: c.Owner, CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20})
	var q *store.QuotaError
	if !errors.As(err, &q) || q.Limit != store.LimitOwnerContainers {
		t.Errorf("a fourth container across replicas: %v", err)
	}
	if err := a.DeleteContainer(ctx, c.Owner, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetFile(ctx, c.Owner, c.ID, f.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b sees a file of a container a deleted: %v", err)
	}
}

// TestPrefixes keeps two deployments apart on one Redis.
func TestPrefixes(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	a, err := redis.New(ctx, url, store.DefaultLimits(), nil, redis.WithPrefix("one:"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redis.New(ctx, url, store.DefaultLimits(), nil, redis.WithPrefix("two:"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_x", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}
	if err := a.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetContainer(ctx, c.Owner, c.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two sees prefix one's container: %v", err)
	}
	for _, k := range keys(t, rdb, "*") {
		if !strings.HasPrefix(k, "one:") {
			t.Errorf("key %q outside the prefix", k)
		}
	}
}

// TestRedisFull runs Redis with a small maxmemory and noeviction: uploads
// end with a QuotaError that says Redis is full, nothing half-written
// stays, and deleting still works (and makes room).
func TestRedisFull(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s, err := redis.New(ctx, url, store.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_full", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}
	if err := s.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("z"), 64<<10)
	var stored []store.File
	var full error
	for i := range 64 {
		f, err := s.PutFile(ctx, store.File{Owner: c.Owner, ContainerID: c.ID, Path: fmt.Sprintf("/mnt/data/%d", i)}, chunk)
		if err != nil {
			full = err
			break
		}
		stored = append(stored, f)
	}
	if full == nil {
		t.Fatal("4 MiB went into a 2 MiB Redis")
	}
	var q *store.QuotaError
	if !errors.As(full, &q) || q.Limit != store.LimitStoreMemory {
		t.Fatalf("a full Redis gave %v; want a QuotaError for %s", full, store.LimitStoreMemory)
	}
	if q.Max != 2<<20 || !strings.Contains(full.Error(), "OOM") {
		t.Errorf("error %q (max %d): want maxmemory and Redis' words", full, q.Max)
	}
	t.Logf("full after %d files: %v", len(stored), full)
	// Every file that was accepted is whole; the refused one is absent.
	page, _, err := s.ListFiles(ctx, c.Owner, c.ID, store.ListOptions{Limit: 100})
	if err != nil || len(page) != len(stored) {
		t.Fatalf("%d files listed (%v), %d stored", len(page), err, len(stored))
	}
	for _, f := range stored {
		if data, err := s.FileContent(ctx, c.Owner, c.ID, f.ID); err != nil || !bytes.Equal(data, chunk) {
			t.Fatalf("file %s: %d bytes, %v", f.Path, len(data), err)
		}
	}
	// A full store still reads, touches and deletes; deleting makes room.
	if _, err := s.TouchContainer(ctx, c.Owner, c.ID, time.Now()); err != nil {
		t.Errorf("touch on a full Redis: %v", err)
	}
	for _, f := range stored {
		if err := s.DeleteFile(ctx, c.Owner, c.ID, f.ID); err != nil {
			t.Fatalf("delete on a full Redis: %v", err)
		}
	}
	if _, err := s.PutFile(ctx, store.File{Owner: c.Owner, ContainerID: c.ID, Path: "/mnt/data/again"}, chunk); err != nil {
		t.Errorf("after deleting: %v", err)
	}
}

// TestNewFails reports an unreachable Redis from New, not on first use.
func TestNewFails(t *testing.T) {
	srv := redistest.StartServer(t)
	url := srv.URL
	if _, err := redis.New(context.Background(), "not a url", store.DefaultLimits(), nil); err == nil {
		t.Error("a bad url accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := redis.New(ctx, url, store.DefaultLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, err := redis.New(ctx, "redis://127.0.0.1:1/0", store.DefaultLimits(), nil); err == nil {
		t.Error("New succeeded without a Redis")
	}
}
