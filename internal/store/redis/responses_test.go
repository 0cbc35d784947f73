package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestResponsesConformance runs the shared Responses suite on one real
// redis-server, each store under a key prefix of its own.
func TestResponsesConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.RunResponses(t, func(t *testing.T, l store.ResponseLimits, now func() time.Time) store.Responses {
		s, err := redis.NewResponses(context.Background(), url, l, now, redis.WithPrefix(fmt.Sprintf("r%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// testResponse is owner's response id with an item per item id.
func testResponse(owner, id string, items ...string) store.Response {
	r := store.Response{ID: id, Owner: owner, Object: json.RawMessage(`{"id":"` + id + `"}`)}
	for _, it := range items {
		r.Items = append(r.Items, store.ResponseItem{ID: it, Model: []json.RawMessage{json.RawMessage(`{"id":"` + it + `"}`)}})
	}
	return r
}

func newResponses(t *testing.T, url string, l store.ResponseLimits, now func() time.Time, opts ...redis.Option) *redis.Responses {
	t.Helper()
	s, err := redis.NewResponses(context.Background(), url, l, now, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustPut(t *testing.T, s store.Responses, r store.Response) {
	t.Helper()
	if err := s.PutResponse(context.Background(), r); err != nil {
		t.Fatalf("PutResponse %s: %v", r.ID, err)
	}
}

// wantKeys checks the keys under pattern are exactly want (suffixes after
// the owner's prefix).
func wantKeys(t *testing.T, ks []string, kp string, want ...string) {
	t.Helper()
	var got []string
	for _, k := range ks {
		got = append(got, strings.TrimPrefix(k, kp))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("keys under %s: %q, want %q", kp, got, want)
	}
}

// TestResponsesKeys checks the key layout, and that a replacement, a
// delete and racing replacements leave no key behind that the current
// state does not need.
func TestResponsesKeys(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	s := newResponses(t, url, store.DefaultResponseLimits(), nil)
	kp := redis.DefaultPrefix + "{o_k}:"
	mustPut(t, s, testResponse("o_k", "resp_1", "msg_a", "msg_b"))
	wantKeys(t, keys(t, rdb, "*"), kp, "resp:resp_1", "respidx:resp_1", "respitem:msg_a", "respitem:msg_b")
	mustPut(t, s, testResponse("o_k", "resp_1", "msg_b", "msg_c"))
	wantKeys(t, keys(t, rdb, "*"), kp, "resp:resp_1", "respidx:resp_1", "respitem:msg_b", "respitem:msg_c")
	mustPut(t, s, testResponse("o_k", "resp_2", "msg_c", "msg_d"))
	if v := rdb.Get(ctx, kp+"respitem:msg_c").Val(); v != "resp_2" {
		t.Errorf("msg_c names %q after resp_2 took it, want resp_2", v)
	}
	if err := s.DeleteResponse(ctx, "o_k", "resp_1"); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, keys(t, rdb, "*"), kp, "resp:resp_2", "respidx:resp_2", "respitem:msg_c", "respitem:msg_d")

	// Racing replacements: the item keys are the last version's, no more.
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for k := range 15 {
				r := testResponse("o_k", "resp_3", fmt.Sprintf("msg_%d_%d_x", g, k), fmt.Sprintf("msg_%d_%d_y", g, k))
				if err := s.PutResponse(ctx, r); err != nil {
					t.Errorf("PutResponse: %v", err)
				}
			}
		})
	}
	wg.Wait()
	final, err := s.GetResponse(ctx, "o_k", "resp_3")
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, keys(t, rdb, kp+"respitem:msg_*_*_*"), kp, "respitem:"+final.Items[0].ID, "respitem:"+final.Items[1].ID)
	if err := s.DeleteResponse(ctx, "o_k", "resp_3"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteResponse(ctx, "o_k", "resp_2"); err != nil {
		t.Fatal(err)
	}
	if ks := keys(t, rdb, "*"); len(ks) != 0 {
		t.Errorf("keys left after deleting everything: %q", ks)
	}
}

// TestResponsesStaleIndex: an item key left naming a response that does
// not hold the item (a maxmemory policy that evicts keys can leave one),
// or one that is gone, finds nothing.
func TestResponsesStaleIndex(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	s := newResponses(t, url, store.DefaultResponseLimits(), nil)
	mustPut(t, s, testResponse("o_s", "resp_1", "msg_1"))
	kp := redis.DefaultPrefix + "{o_s}:"
	rdb.Set(ctx, kp+"respitem:msg_stale", "resp_1", 0)
	rdb.Set(ctx, kp+"respitem:msg_gone", "resp_gone", 0)
	rdb.Set(ctx, kp+"respitem:msg_bad", "resp:{x}", 0)
	for _, item := range []string{"msg_stale", "msg_gone", "msg_bad"} {
		if r, err := s.FindItem(ctx, "o_s", item); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("FindItem through a stale key %s: %s, %v", item, r.ID, err)
		}
	}
	if r, err := s.FindItem(ctx, "o_s", "msg_1"); err != nil || r.ID != "resp_1" {
		t.Errorf("FindItem msg_1: %s, %v", r.ID, err)
	}
}

// TestResponsesTTLsExpireForReal uses the real clock and a short TTL:
// every key of a response has it, a replacement renews it, and the keys
// vanish from Redis with no store call to clean up. With no TTL, no key
// expires.
func TestResponsesTTLsExpireForReal(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	l := store.DefaultResponseLimits()
	l.TTL = 1500 * time.Millisecond
	s := newResponses(t, url, l, nil)
	mustPut(t, s, testResponse("o_real", "resp_1", "msg_a", "msg_b"))
	time.Sleep(500 * time.Millisecond)
	mustPut(t, s, testResponse("o_real", "resp_2", "msg_c"))
	ks := keys(t, rdb, redis.DefaultPrefix+"*")
	if len(ks) != 7 {
		t.Fatalf("keys after the writes: %q", ks)
	}
	for _, k := range ks {
		ttl := rdb.PTTL(ctx, k).Val()
		if ttl <= 0 || ttl > l.TTL {
			t.Errorf("key %s has TTL %v; want a positive one up to %v", k, ttl, l.TTL)
		}
		if strings.HasSuffix(k, "resp_2") && ttl < l.TTL-300*time.Millisecond {
			t.Errorf("key %s has TTL %v; want about %v", k, ttl, l.TTL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(keys(t, rdb, redis.DefaultPrefix+"*")) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if ks := keys(t, rdb, redis.DefaultPrefix+"*"); len(ks) != 0 {
		t.Fatalf("keys left after the TTL: %q", ks)
	}
	if _, err := s.GetResponse(ctx, "o_real", "resp_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetResponse after the TTL: %v", err)
	}

	l.TTL = 0
	forever := newResponses(t, url, l, nil, redis.WithPrefix("forever:"))
	mustPut(t, forever, testResponse("o_real", "resp_f", "msg_f"))
	ks = keys(t, rdb, "forever:*")
	if len(ks) != 3 {
		t.Fatalf("keys of a response without TTL: %q", ks)
	}
	for _, k := range ks {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
			t.Errorf("key %s of a response that never expires has TTL %v", k, ttl)
		}
	}
}

// TestResponsesTwoReplicas has two Responses (two servers) on one Redis:
// each reads, finds, replaces and deletes what the other wrote.
func TestResponsesTwoReplicas(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	a := newResponses(t, url, store.DefaultResponseLimits(), nil)
	b := newResponses(t, url, store.DefaultResponseLimits(), nil)
	first := testResponse("o_x", "resp_1", "msg_1")
	mustPut(t, a, first)
	second := testResponse("o_x", "resp_2", "msg_2")
	second.Previous, second.History = first.ID, []string{first.ID}
	mustPut(t, b, second)
	got, err := a.GetResponses(ctx, "o_x", []string{first.ID, second.ID})
	if err != nil || len(got) != 2 || got[1].Previous != first.ID {
		t.Fatalf("replica a reads both: %+v, %v", got, err)
	}
	if r, err := b.FindItem(ctx, "o_x", "msg_1"); err != nil || r.ID != first.ID {
		t.Fatalf("replica b finds a's item: %s, %v", r.ID, err)
	}
	mustPut(t, b, testResponse("o_x", first.ID, "msg_1b"))
	if _, err := a.FindItem(ctx, "o_x", "msg_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replica a finds the item b's replacement dropped: %v", err)
	}
	if r, err := a.FindItem(ctx, "o_x", "msg_1b"); err != nil || r.ID != first.ID {
		t.Errorf("replica a finds b's replacement's item: %s, %v", r.ID, err)
	}
	if err := a.DeleteResponse(ctx, "o_x", second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetResponse(ctx, "o_x", second.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replica b reads a response a deleted: %v", err)
	}
}

// TestResponsesPrefixes keeps two deployments' responses apart on one
// Redis, and beside a Store under the same prefix.
func TestResponsesPrefixes(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	one := newResponses(t, url, store.DefaultResponseLimits(), nil, redis.WithPrefix("one:"))
	two := newResponses(t, url, store.DefaultResponseLimits(), nil, redis.WithPrefix("two:"))
	mustPut(t, one, testResponse("o_x", "resp_1", "msg_1"))
	if _, err := two.GetResponse(ctx, "o_x", "resp_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two reads prefix one's response: %v", err)
	}
	if _, err := two.FindItem(ctx, "o_x", "msg_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two finds prefix one's item: %v", err)
	}
	if err := two.DeleteResponse(ctx, "o_x", "resp_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two deletes prefix one's response: %v", err)
	}
	if _, err := one.GetResponse(ctx, "o_x", "resp_1"); err != nil {
		t.Errorf("prefix one's response: %v", err)
	}
	// A Store under the same prefix shares the Redis, not the keys.
	st, err := redis.New(ctx, url, store.DefaultLimits(), nil, redis.WithPrefix("one:"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().Unix()
	if err := st.PutContainer(ctx, store.Container{ID: "resp_1", Owner: "o_x", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}); err != nil {
		t.Fatal(err)
	}
	if r, err := one.GetResponse(ctx, "o_x", "resp_1"); err != nil || string(r.Object) != `{"id":"resp_1"}` {
		t.Errorf("the response beside a container of its id: %s, %v", r.Object, err)
	}
	for _, k := range keys(t, rdb, "*") {
		if !strings.HasPrefix(k, "one:") {
			t.Errorf("key %q outside the prefix", k)
		}
	}
}

// TestResponsesClient: over a client the caller made, Close leaves it
// open (a Store may be using it).
func TestResponsesClient(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	s, err := redis.NewResponsesClient(ctx, rdb, store.DefaultResponseLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, testResponse("o_c", "resp_1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
	own := newResponses(t, url, store.DefaultResponseLimits(), nil)
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := own.GetResponse(ctx, "o_c", "resp_1"); err == nil {
		t.Error("NewResponses' client still works after Close")
	}
}

// TestResponsesRedisFull runs Redis with a small maxmemory and noeviction:
// a put ends with a QuotaError that says Redis is full, what was accepted
// is whole, nothing of the refused one is there, and deleting still works
// and makes room.
func TestResponsesRedisFull(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s := newResponses(t, url, store.DefaultResponseLimits(), nil)
	big := func(i int) store.Response {
		r := testResponse("o_full", fmt.Sprintf("resp_%d", i), fmt.Sprintf("msg_%d", i))
		r.Object = json.RawMessage(`"` + strings.Repeat("z", 64<<10) + `"`)
		return r
	}
	var stored []string
	var full error
	for i := range 64 {
		if err := s.PutResponse(ctx, big(i)); err != nil {
			full = err
			break
		}
		stored = append(stored, big(i).ID)
	}
	if full == nil {
		t.Fatal("4 MiB of responses went into a 2 MiB Redis")
	}
	var q *store.QuotaError
	if !errors.As(full, &q) || q.Limit != store.LimitStoreMemory {
		t.Fatalf("a full Redis gave %v; want a QuotaError for %s", full, store.LimitStoreMemory)
	}
	if !strings.Contains(full.Error(), "OOM") {
		t.Errorf("error %q: want Redis' words", full)
	}
	refused := big(len(stored))
	if _, err := s.GetResponse(ctx, "o_full", refused.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused response: %v", err)
	}
	if _, err := s.FindItem(ctx, "o_full", refused.Items[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused response's item: %v", err)
	}
	got, err := s.GetResponses(ctx, "o_full", stored)
	if err != nil || len(got) != len(stored) {
		t.Fatalf("reading a full Redis: %d responses, %v", len(got), err)
	}
	for _, r := range got {
		if len(r.Object) != 64<<10+2 {
			t.Errorf("%s: %d bytes of object", r.ID, len(r.Object))
		}
	}
	for _, id := range stored {
		if err := s.DeleteResponse(ctx, "o_full", id); err != nil {
			t.Fatalf("delete on a full Redis: %v", err)
		}
	}
	if err := s.PutResponse(ctx, refused); err != nil {
		t.Errorf("after deleting: %v", err)
	}
}

// TestNewResponsesFails reports a bad URL or an unreachable Redis from
// NewResponses, not on first use.
func TestNewResponsesFails(t *testing.T) {
	if _, err := redis.NewResponses(context.Background(), "not a url", store.DefaultResponseLimits(), nil); err == nil {
		t.Error("a bad url accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := redis.NewResponses(ctx, "redis://127.0.0.1:1/0", store.DefaultResponseLimits(), nil); err == nil {
		t.Error("NewResponses succeeded without a Redis")
	}
}
