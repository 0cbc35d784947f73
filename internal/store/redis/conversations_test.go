package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestConversationsConformance runs the shared Conversations suite on one
// real redis-server, each store under a key prefix of its own.
func TestConversationsConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.RunConversations(t, func(t *testing.T, l store.ConversationLimits, now func() time.Time) store.Conversations {
		s, err := redis.NewConversations(context.Background(), url, l, now, redis.WithPrefix(fmt.Sprintf("c%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func newConversations(t *testing.T, url string, l store.ConversationLimits, opts ...redis.Option) *redis.Conversations {
	t.Helper()
	s, err := redis.NewConversations(context.Background(), url, l, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testItems are items named by ids, each naming itself.
func testItems(ids ...string) []store.ConversationItem {
	var out []store.ConversationItem
	for _, id := range ids {
		out = append(out, store.ConversationItem{
			ID: id, Item: json.RawMessage(`{"id":"` + id + `"}`),
			Model: []json.RawMessage{json.RawMessage(`{"content":"` + id + `"}`)},
		})
	}
	return out
}

func itemIDsOf(items []store.ConversationItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

func mustCreate(t *testing.T, s store.Conversations, owner, id string, items ...store.ConversationItem) {
	t.Helper()
	if err := s.PutConversation(context.Background(), store.Conversation{ID: id, Owner: owner}, items); err != nil {
		t.Fatalf("PutConversation %s: %v", id, err)
	}
}

func mustAppend(t *testing.T, s store.Conversations, owner, id string, items ...store.ConversationItem) {
	t.Helper()
	if err := s.AppendItems(context.Background(), owner, id, items); err != nil {
		t.Fatalf("AppendItems %s: %v", id, err)
	}
}

func wantConvItems(t *testing.T, s store.Conversations, owner, id string, want ...string) {
	t.Helper()
	items, err := s.Items(context.Background(), owner, id)
	if err != nil {
		t.Fatalf("Items %s: %v", id, err)
	}
	if want == nil {
		want = []string{}
	}
	if got := itemIDsOf(items); !slices.Equal(got, want) {
		t.Errorf("Items of %s: %q, want %q", id, got, want)
	}
}

// TestConversationsKeys checks the key layout: four keys for an owner's
// conversation, none with a TTL, a byte count that follows appends and
// deletes, and nothing left once everything is deleted.
func TestConversationsKeys(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	s := newConversations(t, url, store.DefaultConversationLimits())
	kp := redis.DefaultPrefix + "{o_k}:"
	items := testItems("msg_a", "msg_b")
	mustCreate(t, s, "o_k", "conv_1", items...)
	wantKeys(t, keys(t, rdb, "*"), kp, "conv:conv_1", "convorder:conv_1", "convitems:conv_1", "convs")
	for _, k := range keys(t, rdb, "*") {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
			t.Errorf("key %s has TTL %v; conversations never expire", k, ttl)
		}
	}
	wantBytes := func(want int64) {
		t.Helper()
		got, err := rdb.HGet(ctx, kp+"conv:conv_1", "bytes").Int64()
		if err != nil || got != want {
			t.Errorf("bytes of conv_1: %d, %v; want %d", got, err, want)
		}
	}
	wantBytes(items[0].Size() + items[1].Size())
	// An update writes the md field of conv: and nothing else; clearing
	// removes it.
	if _, err := s.UpdateConversation(ctx, "o_k", "conv_1", json.RawMessage(`{"k":"v"}`)); err != nil {
		t.Fatal(err)
	}
	if md := rdb.HGet(ctx, kp+"conv:conv_1", "md").Val(); md != `{"k":"v"}` {
		t.Errorf("md after an update: %q", md)
	}
	if _, err := s.UpdateConversation(ctx, "o_k", "conv_1", nil); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HExists(ctx, kp+"conv:conv_1", "md").Val(); n {
		t.Error("md still there after clearing the metadata")
	}
	wantKeys(t, keys(t, rdb, "*"), kp, "conv:conv_1", "convorder:conv_1", "convitems:conv_1", "convs")
	if order := rdb.ZRange(ctx, kp+"convorder:conv_1", 0, -1).Val(); !slices.Equal(order, []string{"msg_a", "msg_b"}) {
		t.Errorf("convorder: %q", order)
	}
	if v := rdb.HGet(ctx, kp+"convitems:conv_1", "msg_a").Val(); !strings.HasPrefix(v, strconv.FormatInt(items[0].Size(), 10)+":{") {
		t.Errorf("convitems value %q: want its Size, a colon and its record", v)
	}
	more := testItems("msg_c")
	mustAppend(t, s, "o_k", "conv_1", more...)
	wantBytes(items[0].Size() + items[1].Size() + more[0].Size())
	if err := s.DeleteItem(ctx, "o_k", "conv_1", "msg_a"); err != nil {
		t.Fatal(err)
	}
	wantBytes(items[1].Size() + more[0].Size())
	if members := rdb.SMembers(ctx, kp+"convs").Val(); !slices.Equal(members, []string{"conv_1"}) {
		t.Errorf("convs: %q", members)
	}
	mustCreate(t, s, "o_k", "conv_2")
	if n := rdb.SCard(ctx, kp+"convs").Val(); n != 2 {
		t.Errorf("convs holds %d conversations, want 2", n)
	}
	for _, id := range []string{"conv_1", "conv_2"} {
		if err := s.DeleteConversation(ctx, "o_k", id); err != nil {
			t.Fatal(err)
		}
	}
	if ks := keys(t, rdb, "*"); len(ks) != 0 {
		t.Errorf("keys left after deleting everything: %q", ks)
	}
}

// TestConversationsStaleKeys: what an evicting maxmemory policy (or a
// hand) could leave behind does not confuse the store — convs entries
// without their conversation are pruned when the bound is reached rather
// than counted, and order and item keys without their conversation do not
// resurface in a new one of that id.
func TestConversationsStaleKeys(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	l := store.DefaultConversationLimits()
	l.Conversations = 1
	s := newConversations(t, url, l)
	kp := redis.DefaultPrefix + "{o_s}:"
	rdb.SAdd(ctx, kp+"convs", "conv_ghost", "conv_stale")
	rdb.HSet(ctx, kp+"convitems:conv_stale", "msg_old", "3:{}")
	rdb.ZAdd(ctx, kp+"convorder:conv_stale", goredis.Z{Score: 1, Member: "msg_old"})
	// Neither stale entry counts against the bound of one; conv_stale
	// starts empty.
	mustCreate(t, s, "o_s", "conv_stale", testItems("msg_new")...)
	wantConvItems(t, s, "o_s", "conv_stale", "msg_new")
	if _, err := s.GetItem(ctx, "o_s", "conv_stale", "msg_old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetItem of a stale item: %v", err)
	}
	if err := s.DeleteConversation(ctx, "o_s", "conv_stale"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "o_s", "conv_real")
	if m := rdb.SMembers(ctx, kp+"convs").Val(); !slices.Equal(m, []string{"conv_real"}) {
		t.Errorf("convs after a create at the bound: %q, want the stale entries pruned", m)
	}
	err := s.PutConversation(ctx, store.Conversation{ID: "conv_more", Owner: "o_s"}, nil)
	var q *store.QuotaError
	if !errors.As(err, &q) || q.Limit != store.LimitConversations {
		t.Errorf("a second live conversation past a bound of one: %v", err)
	}
	// A record that is not this owner's (a key written by hand) is not
	// found, and an update does not write to it.
	rdb.HSet(ctx, kp+"conv:conv_other", "rec", `{"id":"conv_other","owner":"o_x","created_at":1}`)
	if _, err := s.GetConversation(ctx, "o_s", "conv_other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetConversation of another owner's record: %v", err)
	}
	if _, err := s.UpdateConversation(ctx, "o_s", "conv_other", json.RawMessage(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateConversation of another owner's record: %v", err)
	}
	rdb.HSet(ctx, kp+"conv:conv_junk", "rec", `not json`)
	if _, err := s.UpdateConversation(ctx, "o_s", "conv_junk", json.RawMessage(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateConversation of a record that is not JSON: %v", err)
	}
	if rdb.HExists(ctx, kp+"conv:conv_other", "md").Val() || rdb.HExists(ctx, kp+"conv:conv_junk", "md").Val() {
		t.Error("an update wrote metadata to a record not its conversation's")
	}
}

// TestConversationsTwoReplicas has two Conversations (two servers) on one
// Redis: each reads, appends to, updates and deletes what the other wrote,
// and their concurrent appends all land, each exactly once, in one order
// both see; the owner's conversation bound holds across them.
func TestConversationsTwoReplicas(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	l := store.DefaultConversationLimits()
	l.Conversations = 3
	a := newConversations(t, url, l)
	b := newConversations(t, url, l)
	mustCreate(t, a, "o_x", "conv_1", testItems("msg_a1")...)
	mustAppend(t, b, "o_x", "conv_1", testItems("msg_b1")...)
	wantConvItems(t, a, "o_x", "conv_1", "msg_a1", "msg_b1")
	if _, err := b.UpdateConversation(ctx, "o_x", "conv_1", json.RawMessage(`{"by":"b"}`)); err != nil {
		t.Fatal(err)
	}
	if c, err := a.GetConversation(ctx, "o_x", "conv_1"); err != nil || string(c.Metadata) != `{"by":"b"}` {
		t.Errorf("replica a reads b's metadata: %q, %v", c.Metadata, err)
	}
	var d *store.DuplicateItemError
	if err := a.AppendItems(ctx, "o_x", "conv_1", testItems("msg_b1")); !errors.As(err, &d) || d.ID != "msg_b1" {
		t.Errorf("replica a appends b's item again: %v, want a DuplicateItemError", err)
	}

	const each = 30
	var wg sync.WaitGroup
	for r, s := range []*redis.Conversations{a, b} {
		for g := range 3 {
			wg.Go(func() {
				for k := range each {
					if err := s.AppendItems(ctx, "o_x", "conv_1", testItems(fmt.Sprintf("msg_r%d_g%d_%d", r, g, k))); err != nil {
						t.Errorf("AppendItems: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	fromA, err := a.Items(ctx, "o_x", "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	fromB, err := b.Items(ctx, "o_x", "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	ia, ib := itemIDsOf(fromA), itemIDsOf(fromB)
	if !slices.Equal(ia, ib) {
		t.Errorf("the replicas see two orders")
	}
	seen := map[string]bool{}
	for _, id := range ia {
		if seen[id] {
			t.Errorf("%s twice", id)
		}
		seen[id] = true
	}
	if len(ia) != 2+2*3*each {
		t.Errorf("%d items, want %d", len(ia), 2+2*3*each)
	}

	if err := a.DeleteItem(ctx, "o_x", "conv_1", "msg_b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetItem(ctx, "o_x", "conv_1", "msg_b1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replica b reads an item a deleted: %v", err)
	}

	var created, refused atomic.Int64
	for r, s := range []*redis.Conversations{a, b} {
		for g := range 4 {
			wg.Go(func() {
				err := s.PutConversation(ctx, store.Conversation{ID: fmt.Sprintf("conv_r%d_%d", r, g), Owner: "o_x"}, nil)
				var q *store.QuotaError
				switch {
				case err == nil:
					created.Add(1)
				case errors.As(err, &q) && q.Limit == store.LimitConversations:
					refused.Add(1)
				default:
					t.Errorf("PutConversation: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if created.Load() != 2 || refused.Load() != 6 {
		t.Errorf("8 creates on two replicas racing for 2 places: %d created, %d refused", created.Load(), refused.Load())
	}

	if err := b.DeleteConversation(ctx, "o_x", "conv_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetConversation(ctx, "o_x", "conv_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replica a reads a conversation b deleted: %v", err)
	}
	if _, err := a.Items(ctx, "o_x", "conv_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("replica a reads the items of a conversation b deleted: %v", err)
	}
}

// TestConversationsPrefixes keeps two deployments' conversations apart on
// one Redis, and beside a Responses under the same prefix.
func TestConversationsPrefixes(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	one := newConversations(t, url, store.DefaultConversationLimits(), redis.WithPrefix("one:"))
	two := newConversations(t, url, store.DefaultConversationLimits(), redis.WithPrefix("two:"))
	mustCreate(t, one, "o_x", "conv_1", testItems("msg_1")...)
	if _, err := two.GetConversation(ctx, "o_x", "conv_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two reads prefix one's conversation: %v", err)
	}
	if err := two.AppendItems(ctx, "o_x", "conv_1", testItems("msg_2")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two appends to prefix one's conversation: %v", err)
	}
	if err := two.DeleteConversation(ctx, "o_x", "conv_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("prefix two deletes prefix one's conversation: %v", err)
	}
	wantConvItems(t, one, "o_x", "conv_1", "msg_1")
	resp := newResponses(t, url, store.DefaultResponseLimits(), nil, redis.WithPrefix("one:"))
	mustPut(t, resp, testResponse("o_x", "conv_1", "msg_1"))
	wantConvItems(t, one, "o_x", "conv_1", "msg_1")
	if err := resp.DeleteResponse(ctx, "o_x", "conv_1"); err != nil {
		t.Fatal(err)
	}
	wantConvItems(t, one, "o_x", "conv_1", "msg_1")
	for _, k := range keys(t, rdb, "*") {
		if !strings.HasPrefix(k, "one:") {
			t.Errorf("key %q outside the prefix", k)
		}
	}
}

// TestConversationsClient: over a client the caller made, Close leaves
// it open (a Store may be using it); over its own, Close closes it.
func TestConversationsClient(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	rdb := client(t, url)
	s, err := redis.NewConversationsClient(ctx, rdb, store.DefaultConversationLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "o_c", "conv_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
	own := newConversations(t, url, store.DefaultConversationLimits())
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := own.GetConversation(ctx, "o_c", "conv_1"); err == nil {
		t.Error("NewConversations' client still works after Close")
	}
}

// TestConversationsRedisFull runs Redis with a small maxmemory and
// noeviction: an append ends with a QuotaError that says Redis is full,
// what was accepted is whole, nothing of the refused batch is there, a
// new conversation and an update that writes metadata are refused too;
// reads still work, clearing the metadata works, and deleting works and
// makes room.
func TestConversationsRedisFull(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s := newConversations(t, url, store.ConversationLimits{})
	if err := s.PutConversation(ctx, store.Conversation{ID: "conv_full", Owner: "o_full", Metadata: json.RawMessage(`{"v":"1"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	big := func(i int) []store.ConversationItem {
		it := store.ConversationItem{
			ID:   fmt.Sprintf("msg_%d", i),
			Item: json.RawMessage(`"` + strings.Repeat("z", 64<<10) + `"`),
		}
		return []store.ConversationItem{it, {ID: fmt.Sprintf("msg_%d_b", i), Item: json.RawMessage(`{}`)}}
	}
	var stored []string
	var full error
	for i := range 64 {
		if err := s.AppendItems(ctx, "o_full", "conv_full", big(i)); err != nil {
			full = err
			break
		}
		stored = append(stored, itemIDsOf(big(i))...)
	}
	if full == nil {
		t.Fatal("8 MiB of items (base64) went into a 2 MiB Redis")
	}
	var q *store.QuotaError
	if !errors.As(full, &q) || q.Limit != store.LimitStoreMemory {
		t.Fatalf("a full Redis gave %v; want a QuotaError for %s", full, store.LimitStoreMemory)
	}
	if !strings.Contains(full.Error(), "OOM") {
		t.Errorf("error %q: want Redis' words", full)
	}
	wantConvItems(t, s, "o_full", "conv_full", stored...)
	items, err := s.Items(ctx, "o_full", "conv_full")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if !strings.HasSuffix(it.ID, "_b") && len(it.Item) != 64<<10+2 {
			t.Errorf("%s: %d bytes of item", it.ID, len(it.Item))
		}
	}
	if page, _, err := s.ListItems(ctx, "o_full", "conv_full", store.ListOptions{Limit: 2}); err != nil || len(page) != 2 {
		t.Errorf("ListItems on a full Redis: %d, %v", len(page), err)
	}
	if _, err := s.GetItem(ctx, "o_full", "conv_full", stored[0]); err != nil {
		t.Errorf("GetItem on a full Redis: %v", err)
	}
	err = s.PutConversation(ctx, store.Conversation{ID: "conv_new", Owner: "o_full"}, big(99))
	if !errors.As(err, &q) || q.Limit != store.LimitStoreMemory {
		t.Errorf("a new conversation on a full Redis: %v", err)
	}
	if _, err := s.GetConversation(ctx, "o_full", "conv_new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused conversation: %v", err)
	}
	_, err = s.UpdateConversation(ctx, "o_full", "conv_full", json.RawMessage(`{"v":"2"}`))
	if !errors.As(err, &q) || q.Limit != store.LimitStoreMemory {
		t.Errorf("an update writing metadata on a full Redis: %v", err)
	}
	if c, err := s.GetConversation(ctx, "o_full", "conv_full"); err != nil || string(c.Metadata) != `{"v":"1"}` {
		t.Errorf("after the refused update: metadata %q, %v", c.Metadata, err)
	}
	if c, err := s.UpdateConversation(ctx, "o_full", "conv_full", nil); err != nil || c.Metadata != nil {
		t.Errorf("clearing the metadata on a full Redis: %q, %v", c.Metadata, err)
	}
	if _, err := s.UpdateConversation(ctx, "o_full", "conv_gone", nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("clearing the metadata of no conversation on a full Redis: %v", err)
	}
	for _, id := range stored[:len(stored)/2] {
		if err := s.DeleteItem(ctx, "o_full", "conv_full", id); err != nil {
			t.Fatalf("DeleteItem on a full Redis: %v", err)
		}
	}
	if err := s.DeleteConversation(ctx, "o_full", "conv_full"); err != nil {
		t.Fatalf("DeleteConversation on a full Redis: %v", err)
	}
	if err := s.PutConversation(ctx, store.Conversation{ID: "conv_new", Owner: "o_full"}, big(99)); err != nil {
		t.Errorf("after deleting: %v", err)
	}
}

// TestNewConversationsFails reports a bad URL or an unreachable Redis
// from NewConversations, not on first use.
func TestNewConversationsFails(t *testing.T) {
	if _, err := redis.NewConversations(context.Background(), "not a url", store.DefaultConversationLimits(), nil); err == nil {
		t.Error("a bad url accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := redis.NewConversations(ctx, "redis://127.0.0.1:1/0", store.DefaultConversationLimits(), nil); err == nil {
		t.Error("NewConversations succeeded without a Redis")
	}
}

// TestConversationsManyItems reads a conversation of more items than the
// read script fetches in one HMGET (1000), and pages through its end: the
// chunks join in order, none lost or repeated.
func TestConversationsManyItems(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	s := newConversations(t, url, store.DefaultConversationLimits())
	var ids []string
	for i := range 2500 {
		ids = append(ids, fmt.Sprintf("msg_%04d", i))
	}
	mustCreate(t, s, "o_m", "conv_m", testItems(ids[:1200]...)...)
	mustAppend(t, s, "o_m", "conv_m", testItems(ids[1200:]...)...)
	items, err := s.Items(ctx, "o_m", "conv_m")
	if err != nil {
		t.Fatal(err)
	}
	if got := itemIDsOf(items); !slices.Equal(got, ids) {
		t.Fatalf("Items of %d items: %d, not in order", len(ids), len(got))
	}
	for i, it := range items {
		if string(it.Item) != `{"id":"`+ids[i]+`"}` {
			t.Fatalf("item %d is %s", i, it.Item)
		}
	}
	page, more, err := s.ListItems(ctx, "o_m", "conv_m", store.ListOptions{After: ids[3]})
	if err != nil || more || !slices.Equal(itemIDsOf(page), []string{ids[2], ids[1], ids[0]}) {
		t.Errorf("the oldest page, newest first: %q, more %v, %v", itemIDsOf(page), more, err)
	}
}
