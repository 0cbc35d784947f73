package storetest

import (
	"bytes"
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

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// ConversationsFactory makes an empty store.Conversations bounded by l
// whose clock is now; whatever it holds must be released by the factory's
// cleanup (t.Cleanup). RunConversations takes one so the same cases run
// against every implementation.
type ConversationsFactory func(t *testing.T, l store.ConversationLimits, now func() time.Time) store.Conversations

// RunConversations runs the store.Conversations conformance suite against
// stores newStore makes: every behaviour the contract promises, so that
// callers (the API, the interceptor) can rely on the interface and not on
// an implementation.
func RunConversations(t *testing.T, newStore ConversationsFactory) {
	tests := []struct {
		name string
		run  func(t *testing.T, f ConversationsFactory)
	}{
		{"RoundTrip", testConvRoundTrip},
		{"Copies", testConvCopies},
		{"UpdateMetadata", testConvUpdate},
		{"UpdateMissing", testConvUpdateMissing},
		{"PutExisting", testConvPutExisting},
		{"OwnerScoping", testConvOwners},
		{"AppendOrder", testConvAppend},
		{"ItemQuota", testConvItemQuota},
		{"ByteQuota", testConvByteQuota},
		{"DuplicateItems", testConvDuplicates},
		{"OwnerConversations", testConvCount},
		{"ListItems", testConvList},
		{"ListItemsClamp", testConvListClamp},
		{"GetDeleteItem", testConvGetDeleteItem},
		{"DeleteItemFrees", testConvDeleteFrees},
		{"DeleteConversation", testConvDelete},
		{"InvalidIDs", testConvInvalid},
		{"ConcurrentAppends", testConvConcurrentAppends},
		{"ConcurrentRaces", testConvConcurrentRaces},
		{"DeleteUpdateRace", testConvDeleteUpdateRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

// convEnv is one test's Conversations and clock.
type convEnv struct {
	t     *testing.T
	s     store.Conversations
	clock *Clock
	ctx   context.Context
}

func newConvEnv(t *testing.T, f ConversationsFactory, l store.ConversationLimits) *convEnv {
	c := NewClock(Start())
	return &convEnv{t: t, s: f(t, l, c.Now), clock: c, ctx: context.Background()}
}

// noLimits are ConversationLimits without any bound.
func noLimits() store.ConversationLimits { return store.ConversationLimits{} }

// convItem is an item named id whose item and model view both name it, so
// a mix-up of items shows.
func convItem(id string) store.ConversationItem {
	return store.ConversationItem{
		ID:    id,
		Item:  json.RawMessage(`{"type":"message","id":"` + id + `"}`),
		Model: []json.RawMessage{json.RawMessage(`{"role":"user","content":"` + id + `"}`)},
	}
}

func convItems(ids ...string) []store.ConversationItem {
	var out []store.ConversationItem
	for _, id := range ids {
		out = append(out, convItem(id))
	}
	return out
}

// sizedItem is an item named id of exactly n bytes (ConversationItem.Size),
// half of them in its model view, so that a store counting only the Item
// is caught.
func sizedItem(id string, n int) store.ConversationItem {
	rest := n - len(id) - 4 // two JSON strings' quotes
	if rest < 0 {
		panic(fmt.Sprintf("sizedItem(%q, %d): too small", id, n))
	}
	it := store.ConversationItem{
		ID:    id,
		Item:  json.RawMessage(`"` + strings.Repeat("i", rest/2) + `"`),
		Model: []json.RawMessage{json.RawMessage(`"` + strings.Repeat("m", rest-rest/2) + `"`)},
	}
	if it.Size() != int64(n) {
		panic(fmt.Sprintf("sizedItem(%q, %d) has %d bytes", id, n, it.Size()))
	}
	return it
}

// create makes owner's conversation id with metadata md ("" for none) and
// items, and returns what it put.
func (e *convEnv) create(owner, id, md string, items ...store.ConversationItem) store.Conversation {
	e.t.Helper()
	c := store.Conversation{ID: id, Owner: owner}
	if md != "" {
		c.Metadata = json.RawMessage(md)
	}
	if err := e.s.PutConversation(e.ctx, c, items); err != nil {
		e.t.Fatalf("PutConversation %s: %v", id, err)
	}
	return c
}

func (e *convEnv) appendOK(owner, id string, items ...store.ConversationItem) {
	e.t.Helper()
	if err := e.s.AppendItems(e.ctx, owner, id, items); err != nil {
		e.t.Fatalf("AppendItems %s: %v", id, err)
	}
}

func (e *convEnv) items(owner, id string) []store.ConversationItem {
	e.t.Helper()
	items, err := e.s.Items(e.ctx, owner, id)
	if err != nil {
		e.t.Fatalf("Items %s: %v", id, err)
	}
	return items
}

func itemIDs(items []store.ConversationItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// wantItems checks owner's conversation id holds exactly the items named
// want, in that order.
func (e *convEnv) wantItems(owner, id string, want ...string) {
	e.t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := itemIDs(e.items(owner, id)); !slices.Equal(got, want) {
		e.t.Errorf("Items of %s: %q, want %q", id, got, want)
	}
}

// list is one page of ListItems; it fails the test on an error.
func (e *convEnv) list(owner, id string, o store.ListOptions) ([]string, bool) {
	e.t.Helper()
	page, more, err := e.s.ListItems(e.ctx, owner, id, o)
	if err != nil {
		e.t.Fatalf("ListItems %s %+v: %v", id, o, err)
	}
	return itemIDs(page), more
}

// wantPage checks one page of ListItems.
func (e *convEnv) wantPage(owner, id string, o store.ListOptions, wantMore bool, want ...string) {
	e.t.Helper()
	if want == nil {
		want = []string{}
	}
	got, more := e.list(owner, id, o)
	if !slices.Equal(got, want) || more != wantMore {
		e.t.Errorf("ListItems %+v: %q, more %v; want %q, more %v", o, got, more, want, wantMore)
	}
}

// diffItem describes how got differs from want, "" for not at all; raw
// messages compare byte for byte, a nil and an empty Model alike.
func diffItem(got, want store.ConversationItem) string {
	var d []string
	if got.ID != want.ID {
		d = append(d, fmt.Sprintf("id %q, want %q", got.ID, want.ID))
	}
	if !bytes.Equal(got.Item, want.Item) {
		d = append(d, fmt.Sprintf("item %q, want %q", got.Item, want.Item))
	}
	if len(got.Model) != len(want.Model) {
		d = append(d, fmt.Sprintf("model %q, want %q", got.Model, want.Model))
	} else {
		for i := range got.Model {
			if !bytes.Equal(got.Model[i], want.Model[i]) {
				d = append(d, fmt.Sprintf("model[%d] %q, want %q", i, got.Model[i], want.Model[i]))
			}
		}
	}
	return strings.Join(d, "; ")
}

func (e *convEnv) wantSameItems(what string, got, want []store.ConversationItem) {
	e.t.Helper()
	if len(got) != len(want) {
		e.t.Errorf("%s: %d items %q, want %d %q", what, len(got), itemIDs(got), len(want), itemIDs(want))
		return
	}
	for i := range got {
		if d := diffItem(got[i], want[i]); d != "" {
			e.t.Errorf("%s[%d]: %s", what, i, d)
		}
	}
}

// wantGoneConv checks that owner's conversation id does not exist for any
// method.
func (e *convEnv) wantGoneConv(owner, id string, items ...string) {
	e.t.Helper()
	_, err := e.s.GetConversation(e.ctx, owner, id)
	wantErr(e.t, "GetConversation "+id, err, store.ErrNotFound)
	_, err = e.s.Items(e.ctx, owner, id)
	wantErr(e.t, "Items "+id, err, store.ErrNotFound)
	_, _, err = e.s.ListItems(e.ctx, owner, id, store.ListOptions{})
	wantErr(e.t, "ListItems "+id, err, store.ErrNotFound)
	_, _, err = e.s.ListItems(e.ctx, owner, id, store.ListOptions{After: "msg_unknown", Order: "asc"})
	wantErr(e.t, "ListItems after an unknown item "+id, err, store.ErrNotFound)
	for _, it := range items {
		_, err = e.s.GetItem(e.ctx, owner, id, it)
		wantErr(e.t, "GetItem "+it+" of "+id, err, store.ErrNotFound)
	}
}

// testConvRoundTrip: a conversation and its items come back as they were
// put, the raw messages byte for byte — their spacing, escapes and the
// characters encoding/json would escape (<, >, &) included — and the
// items in order.
func testConvRoundTrip(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	md := json.RawMessage("{\"topic\": \"<b>a & b</b>\",\n  \"n\":\"\\u00e9 é \\\"q\\\"\" }")
	c := store.Conversation{ID: idgen.New("conv_"), Owner: alice, CreatedAt: 1700000000, Metadata: md}
	items := []store.ConversationItem{
		{ID: "ci_1", Item: json.RawMessage(`{ "type" : "code_interpreter_call", "code": "print(1 < 2 & 3 > 2)" }`),
			Model: []json.RawMessage{
				json.RawMessage(`{"type":"function_call", "call_id":"call_1"}`),
				json.RawMessage(`{"type":"function_call_output","output":"True\n"}`),
			}},
		{ID: "msg_2", Item: json.RawMessage(`{"type":"message",   "content":"\u003c&\u003e"}`)},
		{ID: "rs_3", Item: json.RawMessage(`"a string item"`), Model: []json.RawMessage{json.RawMessage(`{}`)}},
	}
	if err := e.s.PutConversation(e.ctx, c, items); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetConversation(e.ctx, alice, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != c.ID || got.Owner != alice || got.CreatedAt != c.CreatedAt || !bytes.Equal(got.Metadata, md) {
		t.Errorf("GetConversation = %+v (metadata %q), want %+v (metadata %q)", got, got.Metadata, c, md)
	}
	e.wantSameItems("Items", e.items(alice, c.ID), items)
	page, more, err := e.s.ListItems(e.ctx, alice, c.ID, store.ListOptions{Order: "asc"})
	if err != nil || more {
		t.Fatalf("ListItems: more %v, %v", more, err)
	}
	e.wantSameItems("ListItems asc", page, items)
	for _, want := range items {
		it, err := e.s.GetItem(e.ctx, alice, c.ID, want.ID)
		if err != nil {
			t.Fatalf("GetItem %s: %v", want.ID, err)
		}
		if d := diffItem(it, want); d != "" {
			t.Errorf("GetItem %s: %s", want.ID, d)
		}
	}

	// No CreatedAt: the store's now; no metadata: none back; no items.
	bare := store.Conversation{ID: idgen.New("conv_"), Owner: alice}
	if err := e.s.PutConversation(e.ctx, bare, nil); err != nil {
		t.Fatal(err)
	}
	got, err = e.s.GetConversation(e.ctx, alice, bare.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt != e.clock.Now().Unix() || len(got.Metadata) != 0 || got.Owner != alice {
		t.Errorf("a bare conversation: %+v (metadata %q); want created_at %d, no metadata", got, got.Metadata, e.clock.Now().Unix())
	}
	e.wantItems(alice, bare.ID)
	e.wantPage(alice, bare.ID, store.ListOptions{}, false)
}

// testConvCopies: the store keeps its own copies; neither the caller's
// later changes to what it put or appended nor its changes to what it got
// reach it.
func testConvCopies(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	c := store.Conversation{ID: "conv_copies", Owner: alice, Metadata: json.RawMessage(`{"k":"v"}`)}
	first := convItems("msg_1")
	if err := e.s.PutConversation(e.ctx, c, first); err != nil {
		t.Fatal(err)
	}
	more := convItems("msg_2")
	e.appendOK(alice, c.ID, more...)
	want := convItems("msg_1", "msg_2")
	mutate := func(items []store.ConversationItem) {
		for i := range items {
			items[i].Item[0] = 'X'
			items[i].Model[0][0] = 'X'
		}
	}
	c.Metadata[0] = 'X'
	mutate(first)
	mutate(more)
	first[0].ID = "msg_changed"
	check := func(what string) {
		t.Helper()
		got, err := e.s.GetConversation(e.ctx, alice, c.ID)
		if err != nil || string(got.Metadata) != `{"k":"v"}` {
			t.Errorf("%s: metadata %q, %v", what, got.Metadata, err)
		}
		e.wantSameItems(what, e.items(alice, c.ID), want)
	}
	check("after changing what was put")

	got, err := e.s.GetConversation(e.ctx, alice, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	got.Metadata[0] = 'X'
	mutate(e.items(alice, c.ID))
	page, _, err := e.s.ListItems(e.ctx, alice, c.ID, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mutate(page)
	it, err := e.s.GetItem(e.ctx, alice, c.ID, "msg_1")
	if err != nil {
		t.Fatal(err)
	}
	mutate([]store.ConversationItem{it})
	check("after changing what was got")
}

// testConvUpdate: UpdateConversation replaces the metadata and nothing
// else — it returns the conversation with the new metadata, byte for
// byte, its id, owner and created_at as they were; the items stay; the
// owner's conversation bound does not apply (an update is not a new
// conversation); nil metadata clears it.
func testConvUpdate(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Conversations = 1
	l.Items = 2
	e := newConvEnv(t, f, l)
	e.create(alice, "conv_u", `{"v":"1"}`, convItems("msg_a", "msg_b")...)
	before, err := e.s.GetConversation(e.ctx, alice, "conv_u")
	if err != nil {
		t.Fatal(err)
	}
	wantConv := func(what string, got store.Conversation, md string) {
		t.Helper()
		if got.ID != "conv_u" || got.Owner != alice || got.CreatedAt != before.CreatedAt || string(got.Metadata) != md {
			t.Errorf("%s: %+v (metadata %q); want conv_u of %s, created_at %d, metadata %q", what, got, got.Metadata, alice, before.CreatedAt, md)
		}
	}
	// At the owner's bound of one conversation: an update all the same.
	md := json.RawMessage(`{"v": "2", "s":"<&>"}`)
	got, err := e.s.UpdateConversation(e.ctx, alice, "conv_u", md)
	if err != nil {
		t.Fatalf("an update: %v", err)
	}
	wantConv("UpdateConversation's answer", got, string(md))
	md[0] = 'X' // the store kept its own copy
	got.Metadata[0] = 'X'
	got, err = e.s.GetConversation(e.ctx, alice, "conv_u")
	if err != nil {
		t.Fatal(err)
	}
	wantConv("after the update", got, `{"v": "2", "s":"<&>"}`)
	e.wantItems(alice, "conv_u", "msg_a", "msg_b")
	e.wantSameItems("Items after the update", e.items(alice, "conv_u"), convItems("msg_a", "msg_b"))

	// nil metadata clears it; the items stay, and still take appends.
	got, err = e.s.UpdateConversation(e.ctx, alice, "conv_u", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Metadata) != 0 {
		t.Errorf("UpdateConversation(nil) answered metadata %q", got.Metadata)
	}
	wantConv("UpdateConversation(nil)'s answer", got, "")
	got, err = e.s.GetConversation(e.ctx, alice, "conv_u")
	if err != nil {
		t.Fatal(err)
	}
	wantConv("after clearing the metadata", got, "")
	e.wantItems(alice, "conv_u", "msg_a", "msg_b")
	if got, err := e.s.UpdateConversation(e.ctx, alice, "conv_u", json.RawMessage(`{"v":"3"}`)); err != nil || string(got.Metadata) != `{"v":"3"}` {
		t.Errorf("an update after clearing: %q, %v", got.Metadata, err)
	}
	wantErr(t, "a create of the updated id", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_u", Owner: alice}, nil), store.ErrExists)
	e.wantItems(alice, "conv_u", "msg_a", "msg_b")
}

// testConvUpdateMissing: UpdateConversation of a conversation never made,
// of a deleted one, of another owner's or of an id a store cannot hold is
// ErrNotFound, and creates nothing — the conversation is not found
// afterwards for any method, and its id may still be created.
func testConvUpdateMissing(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Conversations = 2
	e := newConvEnv(t, f, l)
	md := json.RawMessage(`{"k":"v"}`)
	update := func(what, owner, id string, md json.RawMessage) {
		t.Helper()
		_, err := e.s.UpdateConversation(e.ctx, owner, id, md)
		wantErr(t, what, err, store.ErrNotFound)
		e.wantGoneConv(owner, id)
	}
	update("UpdateConversation of one never made", alice, "conv_never", md)
	update("UpdateConversation(nil) of one never made", alice, "conv_never", nil)

	e.create(alice, "conv_del", `{"a":"b"}`, convItems("msg_1")...)
	if err := e.s.DeleteConversation(e.ctx, alice, "conv_del"); err != nil {
		t.Fatal(err)
	}
	update("UpdateConversation of a deleted one", alice, "conv_del", md)
	update("UpdateConversation(nil) of a deleted one", alice, "conv_del", nil)
	e.wantGoneConv(alice, "conv_del", "msg_1")

	e.create(alice, "conv_alice", `{"owner":"alice"}`, convItems("msg_1")...)
	update("bob's UpdateConversation of alice's", bob, "conv_alice", md)
	update("bob's UpdateConversation(nil) of alice's", bob, "conv_alice", nil)
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_alice"); err != nil || string(got.Metadata) != `{"owner":"alice"}` {
		t.Errorf("alice's conversation after bob's updates: %q, %v", got.Metadata, err)
	}
	e.wantItems(alice, "conv_alice", "msg_1")

	for _, id := range []string{"", "conv a", "conv_{x}:y", "../conv"} {
		update(fmt.Sprintf("UpdateConversation(%q)", id), alice, id, md)
	}

	// Nothing was created: alice's bound of two still has room for one,
	// and the ids updated in vain are free.
	e.create(alice, "conv_never", "")
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_never"); err != nil || len(got.Metadata) != 0 {
		t.Errorf("a create of the id updated in vain: metadata %q, %v", got.Metadata, err)
	}
	e.wantItems(alice, "conv_never")
	e.create(bob, "conv_alice", "")
	e.wantItems(bob, "conv_alice")
}

// testConvPutExisting: PutConversation only creates — an id the owner
// has a conversation of is ErrExists, and that conversation's
// metadata, created_at and items stay as they were; so it is whatever
// the first items or the owner's bound would say. Another owner's id is
// no obstacle, and once deleted the id may be created again.
func testConvPutExisting(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Conversations = 2
	l.Items = 3
	e := newConvEnv(t, f, l)
	e.create(alice, "conv_x", `{"v":"1"}`, convItems("msg_a", "msg_b")...)
	before, err := e.s.GetConversation(e.ctx, alice, "conv_x")
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		got, err := e.s.GetConversation(e.ctx, alice, "conv_x")
		if err != nil || string(got.Metadata) != `{"v":"1"}` || got.CreatedAt != before.CreatedAt {
			t.Errorf("%s: %+v (metadata %q), %v; want it unchanged", what, got, got.Metadata, err)
		}
		e.wantSameItems(what, e.items(alice, "conv_x"), convItems("msg_a", "msg_b"))
	}
	puts := []struct {
		what  string
		c     store.Conversation
		items []store.ConversationItem
	}{
		{"no metadata, no items", store.Conversation{ID: "conv_x", Owner: alice}, nil},
		{"new metadata and created_at", store.Conversation{ID: "conv_x", Owner: alice, CreatedAt: before.CreatedAt + 1000, Metadata: json.RawMessage(`{"v":"2"}`)}, nil},
		{"new items", store.Conversation{ID: "conv_x", Owner: alice, Metadata: json.RawMessage(`{"v":"2"}`)}, convItems("msg_c")},
		{"items of the same ids", store.Conversation{ID: "conv_x", Owner: alice}, convItems("msg_a", "msg_b")},
		{"items past the bound", store.Conversation{ID: "conv_x", Owner: alice}, convItems("msg_1", "msg_2", "msg_3", "msg_4")},
	}
	for _, p := range puts {
		wantErr(t, "PutConversation of an existing id with "+p.what, e.s.PutConversation(e.ctx, p.c, p.items), store.ErrExists)
		unchanged("after a PutConversation with " + p.what)
	}
	_, err = e.s.GetItem(e.ctx, alice, "conv_x", "msg_c")
	wantErr(t, "GetItem of an item a refused create gave", err, store.ErrNotFound)

	// At the owner's bound: ErrExists for an existing id, a quota for a
	// new one.
	e.create(alice, "conv_y", "")
	wantErr(t, "PutConversation of an existing id at the bound", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_x", Owner: alice}, nil), store.ErrExists)
	wantQuota(t, "a new id at the bound", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_z", Owner: alice}, nil), store.LimitConversations)
	unchanged("at the bound")

	// Bob's conversation of the same id is his own; it changes nothing of
	// alice's, and he cannot create it twice either.
	e.create(bob, "conv_x", `{"owner":"bob"}`, convItems("msg_c")...)
	wantErr(t, "bob's second PutConversation", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_x", Owner: bob}, nil), store.ErrExists)
	unchanged("after bob's create")
	e.wantItems(bob, "conv_x", "msg_c")

	if err := e.s.DeleteConversation(e.ctx, alice, "conv_x"); err != nil {
		t.Fatal(err)
	}
	e.create(alice, "conv_x", `{"v":"new"}`, convItems("msg_n")...)
	e.wantItems(alice, "conv_x", "msg_n")
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_x"); err != nil || string(got.Metadata) != `{"v":"new"}` {
		t.Errorf("the id created again after its delete: %q, %v", got.Metadata, err)
	}
}

// testConvOwners: another owner's conversation does not exist for any
// method, none of them changes it, and the same ids are the other owner's
// own.
func testConvOwners(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_same", `{"owner":"alice"}`, convItems("msg_1", "msg_2")...)

	e.wantGoneConv(bob, "conv_same", "msg_1", "msg_2")
	wantErr(t, "bob's AppendItems", e.s.AppendItems(e.ctx, bob, "conv_same", convItems("msg_bob")), store.ErrNotFound)
	wantErr(t, "bob's DeleteItem", e.s.DeleteItem(e.ctx, bob, "conv_same", "msg_1"), store.ErrNotFound)
	wantErr(t, "bob's DeleteConversation", e.s.DeleteConversation(e.ctx, bob, "conv_same"), store.ErrNotFound)
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_same"); err != nil || string(got.Metadata) != `{"owner":"alice"}` {
		t.Errorf("alice's conversation after bob's calls: %q, %v", got.Metadata, err)
	}
	e.wantItems(alice, "conv_same", "msg_1", "msg_2")

	// Bob's conversation of the same id, with items of the same ids, is
	// his; it neither updates alice's nor shares her items.
	e.create(bob, "conv_same", `{"owner":"bob"}`, convItems("msg_2", "msg_3")...)
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_same"); err != nil || string(got.Metadata) != `{"owner":"alice"}` {
		t.Errorf("alice's conversation after bob's put: %q, %v", got.Metadata, err)
	}
	if got, err := e.s.GetConversation(e.ctx, bob, "conv_same"); err != nil || string(got.Metadata) != `{"owner":"bob"}` || got.Owner != bob {
		t.Errorf("bob's conversation: %+v (%q), %v", got, got.Metadata, err)
	}
	e.wantItems(bob, "conv_same", "msg_2", "msg_3")
	e.appendOK(bob, "conv_same", convItem("msg_1"))
	e.wantItems(alice, "conv_same", "msg_1", "msg_2")
	if err := e.s.DeleteConversation(e.ctx, bob, "conv_same"); err != nil {
		t.Fatal(err)
	}
	e.wantGoneConv(bob, "conv_same", "msg_1", "msg_2", "msg_3")
	e.wantItems(alice, "conv_same", "msg_1", "msg_2")
}

// testConvAppend: appends land in order, a batch in its own order after
// what was there; an empty append changes nothing; a conversation that
// does not exist cannot be appended to.
func testConvAppend(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_a", "", convItems("msg_a")...)
	e.appendOK(alice, "conv_a", convItems("msg_b", "msg_c")...)
	e.appendOK(alice, "conv_a")
	e.appendOK(alice, "conv_a", convItem("msg_d"))
	e.wantItems(alice, "conv_a", "msg_a", "msg_b", "msg_c", "msg_d")
	e.wantPage(alice, "conv_a", store.ListOptions{}, false, "msg_d", "msg_c", "msg_b", "msg_a")
	wantErr(t, "AppendItems to an unknown conversation", e.s.AppendItems(e.ctx, alice, "conv_never", convItems("msg_x")), store.ErrNotFound)
	wantErr(t, "an empty AppendItems to an unknown conversation", e.s.AppendItems(e.ctx, alice, "conv_never", nil), store.ErrNotFound)
	e.wantGoneConv(alice, "conv_never", "msg_x")
}

// testConvItemQuota: ConversationLimits.Items is a QuotaError at one past
// it, for the first items and for an append, and nothing of the refused
// batch is stored.
func testConvItemQuota(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Items = 5
	e := newConvEnv(t, f, l)
	err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_big", Owner: alice}, convItems("m1", "m2", "m3", "m4", "m5", "m6"))
	wantQuota(t, "six first items", err, store.LimitConversationItems)
	var q *store.QuotaError
	if errors.As(err, &q) && q.Max != 5 {
		t.Errorf("QuotaError.Max %d, want 5", q.Max)
	}
	e.wantGoneConv(alice, "conv_big", "m1")

	e.create(alice, "conv_q", "", convItems("m1", "m2", "m3")...)
	wantQuota(t, "three more", e.s.AppendItems(e.ctx, alice, "conv_q", convItems("m4", "m5", "m6")), store.LimitConversationItems)
	e.wantItems(alice, "conv_q", "m1", "m2", "m3")
	_, err = e.s.GetItem(e.ctx, alice, "conv_q", "m4")
	wantErr(t, "GetItem of a refused batch's item", err, store.ErrNotFound)
	e.appendOK(alice, "conv_q", convItems("m4", "m5")...) // exactly 5
	wantQuota(t, "a sixth", e.s.AppendItems(e.ctx, alice, "conv_q", convItems("m6")), store.LimitConversationItems)
	e.wantItems(alice, "conv_q", "m1", "m2", "m3", "m4", "m5")
	e.create(alice, "conv_five", "", convItems("m1", "m2", "m3", "m4", "m5")...) // exactly 5 first items
	e.wantItems(alice, "conv_five", "m1", "m2", "m3", "m4", "m5")
}

// testConvByteQuota: ConversationLimits.Bytes bounds the items' Size (ID,
// Item and Model) — a QuotaError at one byte past it, and nothing of the
// refused batch is stored, not even its items that would fit alone.
func testConvByteQuota(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Bytes = 100
	e := newConvEnv(t, f, l)
	err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_big", Owner: alice}, []store.ConversationItem{sizedItem("a", 60), sizedItem("b", 41)})
	wantQuota(t, "101 bytes of first items", err, store.LimitConversationBytes)
	var q *store.QuotaError
	if errors.As(err, &q) && q.Max != 100 {
		t.Errorf("QuotaError.Max %d, want 100", q.Max)
	}
	e.wantGoneConv(alice, "conv_big", "a")

	e.create(alice, "conv_b", "", sizedItem("a", 60))
	wantQuota(t, "an append to 101 bytes", e.s.AppendItems(e.ctx, alice, "conv_b", []store.ConversationItem{sizedItem("b", 30), sizedItem("c", 11)}), store.LimitConversationBytes)
	e.wantItems(alice, "conv_b", "a")
	e.appendOK(alice, "conv_b", sizedItem("b", 30))
	e.appendOK(alice, "conv_b", sizedItem("c", 10)) // exactly 100
	wantQuota(t, "one byte more", e.s.AppendItems(e.ctx, alice, "conv_b", []store.ConversationItem{sizedItem("d", 5)}), store.LimitConversationBytes)
	e.wantItems(alice, "conv_b", "a", "b", "c")
	// The bound is a conversation's: another one has its own.
	e.create(alice, "conv_b2", "", sizedItem("a", 100))
}

// testConvDuplicates: an item id the conversation holds, or one repeated
// within a batch, is a DuplicateItemError naming it, and nothing of the
// batch is appended; a conversation's first items may not repeat an id
// either. Another conversation may use the same ids.
func testConvDuplicates(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_d", "", convItems("msg_a", "msg_b")...)
	wantDup := func(what string, err error, id string) {
		t.Helper()
		var d *store.DuplicateItemError
		if !errors.As(err, &d) {
			t.Errorf("%s: %v, want a DuplicateItemError", what, err)
		} else if d.ID != id {
			t.Errorf("%s: DuplicateItemError for %q, want %q", what, d.ID, id)
		}
	}
	wantDup("appending an item already there", e.s.AppendItems(e.ctx, alice, "conv_d", convItems("msg_c", "msg_a")), "msg_a")
	wantDup("an item twice in a batch", e.s.AppendItems(e.ctx, alice, "conv_d", convItems("msg_d", "msg_e", "msg_d")), "msg_d")
	e.wantItems(alice, "conv_d", "msg_a", "msg_b")
	for _, id := range []string{"msg_c", "msg_d", "msg_e"} {
		_, err := e.s.GetItem(e.ctx, alice, "conv_d", id)
		wantErr(t, "GetItem of a refused batch's "+id, err, store.ErrNotFound)
	}
	err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_twice", Owner: alice}, convItems("msg_x", "msg_y", "msg_x"))
	wantDup("first items with an id twice", err, "msg_x")
	e.wantGoneConv(alice, "conv_twice", "msg_x")

	e.create(alice, "conv_d2", "", convItems("msg_a")...)
	e.appendOK(alice, "conv_d2", convItem("msg_b"))
	e.wantItems(alice, "conv_d2", "msg_a", "msg_b")
	e.appendOK(alice, "conv_d", convItem("msg_c"))
	e.wantItems(alice, "conv_d", "msg_a", "msg_b", "msg_c")
}

// testConvCount: ConversationLimits.Conversations bounds one owner's
// conversations — a QuotaError at one past it, nothing created — not
// another owner's; updates are not new ones, a create of an existing id
// is not one either, and a delete makes room.
func testConvCount(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Conversations = 2
	e := newConvEnv(t, f, l)
	e.create(alice, "conv_1", "", convItems("msg_1")...)
	e.create(alice, "conv_2", "")
	err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_3", Owner: alice}, convItems("msg_3"))
	wantQuota(t, "a third conversation", err, store.LimitConversations)
	var q *store.QuotaError
	if errors.As(err, &q) && q.Max != 2 {
		t.Errorf("QuotaError.Max %d, want 2", q.Max)
	}
	e.wantGoneConv(alice, "conv_3", "msg_3")
	e.create(bob, "conv_1", "")
	e.create(bob, "conv_3", "")
	if _, err := e.s.UpdateConversation(e.ctx, alice, "conv_1", json.RawMessage(`{"updated":"yes"}`)); err != nil {
		t.Errorf("an update at the bound: %v", err)
	}
	wantErr(t, "a create of an existing id at the bound", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_1", Owner: alice}, nil), store.ErrExists)
	if err := e.s.DeleteConversation(e.ctx, alice, "conv_1"); err != nil {
		t.Fatal(err)
	}
	e.create(alice, "conv_3", "", convItems("msg_3")...)
	wantQuota(t, "a third conversation again", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_4", Owner: alice}, nil), store.LimitConversations)
	e.wantItems(alice, "conv_3", "msg_3")
}

// testConvList: ListItems pages in both orders — "desc", the default, is
// newest first —, After is an item id (the page holds the items strictly
// after it), hasMore says whether more follow, and an unknown After is an
// empty page. The cursor is the item, not an offset: deleting an item
// ahead of it neither skips nor repeats one.
func testConvList(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	var all []string
	for i := range 7 {
		all = append(all, fmt.Sprintf("msg_%d", i))
	}
	// Ids whose sort order is not the append order: a store ordering by
	// id is caught.
	all[2], all[5] = "msg_z", "msg_a"
	e.create(alice, "conv_l", "", convItems(all[:3]...)...)
	e.appendOK(alice, "conv_l", convItems(all[3:]...)...)
	rev := slices.Clone(all)
	slices.Reverse(rev)

	asc := store.ListOptions{Order: "asc", Limit: 3}
	e.wantPage(alice, "conv_l", asc, true, all[0:3]...)
	asc.After = all[2]
	e.wantPage(alice, "conv_l", asc, true, all[3:6]...)
	asc.After = all[5]
	e.wantPage(alice, "conv_l", asc, false, all[6])
	asc.After = all[6]
	e.wantPage(alice, "conv_l", asc, false)

	desc := store.ListOptions{Order: "desc", Limit: 3}
	e.wantPage(alice, "conv_l", desc, true, rev[0:3]...)
	desc.After = rev[2]
	e.wantPage(alice, "conv_l", desc, true, rev[3:6]...)
	desc.After = rev[5]
	e.wantPage(alice, "conv_l", desc, false, rev[6])
	desc.After = rev[6]
	e.wantPage(alice, "conv_l", desc, false)

	e.wantPage(alice, "conv_l", store.ListOptions{}, false, rev...) // desc, 20
	e.wantPage(alice, "conv_l", store.ListOptions{Order: "asc", Limit: 7}, false, all...)
	e.wantPage(alice, "conv_l", store.ListOptions{Order: "asc", Limit: 6}, true, all[:6]...)
	e.wantPage(alice, "conv_l", store.ListOptions{Limit: -4}, true, rev[0])
	e.wantPage(alice, "conv_l", store.ListOptions{Limit: 2, After: all[3]}, true, all[2], all[1])
	for _, after := range []string{"msg_unknown", "a b", "{x}", all[0] + "x"} {
		e.wantPage(alice, "conv_l", store.ListOptions{Order: "asc", After: after}, false)
		e.wantPage(alice, "conv_l", store.ListOptions{Order: "desc", After: after}, false)
	}
	if _, _, err := e.s.ListItems(e.ctx, alice, "conv_l", store.ListOptions{Order: "sideways"}); err == nil {
		t.Error(`ListItems with order "sideways": no error`)
	}
	_, _, err := e.s.ListItems(e.ctx, alice, "conv_never", store.ListOptions{})
	wantErr(t, "ListItems of an unknown conversation", err, store.ErrNotFound)

	// Deleting the next item between pages: the next page starts after
	// the cursor all the same.
	page, more := e.list(alice, "conv_l", store.ListOptions{Order: "asc", Limit: 2})
	if !more || len(page) != 2 {
		t.Fatalf("first page: %q, more %v", page, more)
	}
	if err := e.s.DeleteItem(e.ctx, alice, "conv_l", all[2]); err != nil {
		t.Fatal(err)
	}
	e.wantPage(alice, "conv_l", store.ListOptions{Order: "asc", Limit: 2, After: page[1]}, true, all[3], all[4])
	e.wantPage(alice, "conv_l", store.ListOptions{Order: "desc", Limit: 2, After: all[3]}, false, all[1], all[0])
	// A deleted item as the cursor is unknown: an empty page.
	e.wantPage(alice, "conv_l", store.ListOptions{Order: "asc", After: all[2]}, false)
}

// testConvListClamp: a Limit past 100 is clamped to 100.
func testConvListClamp(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	var ids []string
	for i := range store.MaxListLimit + 5 {
		ids = append(ids, fmt.Sprintf("msg_%03d", i))
	}
	e.create(alice, "conv_many", "", convItems(ids...)...)
	page, more := e.list(alice, "conv_many", store.ListOptions{Order: "asc", Limit: 1000})
	if len(page) != store.MaxListLimit || !more || !slices.Equal(page, ids[:store.MaxListLimit]) {
		t.Errorf("Limit 1000: %d items, more %v; want the first %d, more", len(page), more, store.MaxListLimit)
	}
	e.wantPage(alice, "conv_many", store.ListOptions{Order: "asc", Limit: 1000, After: ids[99]}, false, ids[100:]...)
	if got := e.items(alice, "conv_many"); !slices.Equal(itemIDs(got), ids) {
		t.Errorf("Items of %d items: %d, not in order", len(ids), len(got))
	}
}

// testConvGetDeleteItem: GetItem returns one item; DeleteItem removes it
// and nothing else, and it is then not found; its id may be appended
// again, at the end.
func testConvGetDeleteItem(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_i", "", convItems("msg_a", "msg_b", "msg_c", "msg_d")...)
	it, err := e.s.GetItem(e.ctx, alice, "conv_i", "msg_b")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffItem(it, convItem("msg_b")); d != "" {
		t.Errorf("GetItem msg_b: %s", d)
	}
	if err := e.s.DeleteItem(e.ctx, alice, "conv_i", "msg_b"); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.GetItem(e.ctx, alice, "conv_i", "msg_b")
	wantErr(t, "GetItem of a deleted item", err, store.ErrNotFound)
	wantErr(t, "DeleteItem again", e.s.DeleteItem(e.ctx, alice, "conv_i", "msg_b"), store.ErrNotFound)
	wantErr(t, "DeleteItem of an unknown item", e.s.DeleteItem(e.ctx, alice, "conv_i", "msg_never"), store.ErrNotFound)
	_, err = e.s.GetItem(e.ctx, alice, "conv_i", "msg_never")
	wantErr(t, "GetItem of an unknown item", err, store.ErrNotFound)
	wantErr(t, "DeleteItem in an unknown conversation", e.s.DeleteItem(e.ctx, alice, "conv_never", "msg_a"), store.ErrNotFound)
	e.wantItems(alice, "conv_i", "msg_a", "msg_c", "msg_d")
	e.wantPage(alice, "conv_i", store.ListOptions{}, false, "msg_d", "msg_c", "msg_a")
	e.wantSameItems("Items after a delete", e.items(alice, "conv_i"), convItems("msg_a", "msg_c", "msg_d"))

	e.appendOK(alice, "conv_i", convItem("msg_b"))
	e.wantItems(alice, "conv_i", "msg_a", "msg_c", "msg_d", "msg_b")
	for _, id := range []string{"msg_a", "msg_b"} { // the first and the last
		if err := e.s.DeleteItem(e.ctx, alice, "conv_i", id); err != nil {
			t.Fatal(err)
		}
	}
	e.wantItems(alice, "conv_i", "msg_c", "msg_d")
	e.wantPage(alice, "conv_i", store.ListOptions{Order: "asc", After: "msg_c"}, false, "msg_d")
	for _, id := range []string{"msg_c", "msg_d"} {
		if err := e.s.DeleteItem(e.ctx, alice, "conv_i", id); err != nil {
			t.Fatal(err)
		}
	}
	e.wantItems(alice, "conv_i")
	if _, err := e.s.GetConversation(e.ctx, alice, "conv_i"); err != nil {
		t.Errorf("a conversation without items: %v", err)
	}
	e.appendOK(alice, "conv_i", convItem("msg_e"))
	e.wantItems(alice, "conv_i", "msg_e")
}

// testConvDeleteFrees: a deleted item's bytes and its place under the
// item bound are free again — an append that did not fit before fits
// after.
func testConvDeleteFrees(t *testing.T, f ConversationsFactory) {
	l := noLimits()
	l.Items = 3
	l.Bytes = 1000
	e := newConvEnv(t, f, l)
	e.create(alice, "conv_bytes", "", sizedItem("a", 500), sizedItem("b", 500))
	wantQuota(t, "past the bytes", e.s.AppendItems(e.ctx, alice, "conv_bytes", []store.ConversationItem{sizedItem("c", 10)}), store.LimitConversationBytes)
	if err := e.s.DeleteItem(e.ctx, alice, "conv_bytes", "a"); err != nil {
		t.Fatal(err)
	}
	e.appendOK(alice, "conv_bytes", sizedItem("c", 500))
	wantQuota(t, "past the bytes again", e.s.AppendItems(e.ctx, alice, "conv_bytes", []store.ConversationItem{sizedItem("d", 10)}), store.LimitConversationBytes)
	e.wantItems(alice, "conv_bytes", "b", "c")

	e.create(alice, "conv_count", "", convItems("m1", "m2", "m3")...)
	wantQuota(t, "past the items", e.s.AppendItems(e.ctx, alice, "conv_count", convItems("m4")), store.LimitConversationItems)
	if err := e.s.DeleteItem(e.ctx, alice, "conv_count", "m2"); err != nil {
		t.Fatal(err)
	}
	e.appendOK(alice, "conv_count", convItem("m4"))
	e.wantItems(alice, "conv_count", "m1", "m3", "m4")
}

// testConvDelete: a deleted conversation and its items do not exist for
// any method; its id may be used again and starts empty; the owner's
// other conversations stay.
func testConvDelete(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_gone", `{"a":"b"}`, convItems("msg_1", "msg_2")...)
	e.create(alice, "conv_kept", "", convItems("msg_1")...)
	if err := e.s.DeleteConversation(e.ctx, alice, "conv_gone"); err != nil {
		t.Fatal(err)
	}
	e.wantGoneConv(alice, "conv_gone", "msg_1", "msg_2")
	wantErr(t, "AppendItems to a deleted conversation", e.s.AppendItems(e.ctx, alice, "conv_gone", convItems("msg_3")), store.ErrNotFound)
	wantErr(t, "DeleteItem of a deleted conversation", e.s.DeleteItem(e.ctx, alice, "conv_gone", "msg_1"), store.ErrNotFound)
	wantErr(t, "DeleteConversation again", e.s.DeleteConversation(e.ctx, alice, "conv_gone"), store.ErrNotFound)
	wantErr(t, "DeleteConversation of one never made", e.s.DeleteConversation(e.ctx, alice, "conv_never"), store.ErrNotFound)
	e.wantGoneConv(alice, "conv_gone", "msg_3")
	e.wantItems(alice, "conv_kept", "msg_1")

	e.create(alice, "conv_gone", "", convItems("msg_2")...)
	e.wantItems(alice, "conv_gone", "msg_2")
	if got, err := e.s.GetConversation(e.ctx, alice, "conv_gone"); err != nil || len(got.Metadata) != 0 {
		t.Errorf("the new conversation of a deleted one's id: metadata %q, %v", got.Metadata, err)
	}
	_, err := e.s.GetItem(e.ctx, alice, "conv_gone", "msg_1")
	wantErr(t, "GetItem of the deleted conversation's item", err, store.ErrNotFound)
}

// testConvInvalid: ids a store cannot hold are refused on writes that
// would create them (an error, not a quota) and not found everywhere else.
func testConvInvalid(t *testing.T, f ConversationsFactory) {
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	long := "conv_" + strings.Repeat("x", 124)
	if len(long) != 129 {
		t.Fatalf("long id of %d bytes", len(long))
	}
	badIDs := []string{"", "conv a", "conv_{x}:y", "../conv", "conv\n", long}
	refused := func(what string, err error) {
		t.Helper()
		var q *store.QuotaError
		var d *store.DuplicateItemError
		if err == nil || errors.As(err, &q) || errors.As(err, &d) {
			t.Errorf("%s: %v, want an error (not a quota or a duplicate)", what, err)
		}
	}
	for _, id := range badIDs {
		refused(fmt.Sprintf("PutConversation(%q)", id), e.s.PutConversation(e.ctx, store.Conversation{ID: id, Owner: alice}, nil))
	}
	refused("PutConversation without an owner", e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_noowner"}, nil))
	for _, item := range []string{"", "msg a", "msg:{x}", long} {
		err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_baditem", Owner: alice}, convItems("msg_ok", item))
		refused(fmt.Sprintf("PutConversation with item %q", item), err)
	}
	e.wantGoneConv(alice, "conv_baditem", "msg_ok")

	e.create(alice, "conv_ok", "", convItems("msg_ok")...)
	for _, item := range []string{"", "msg a", "msg:{x}", long} {
		refused(fmt.Sprintf("AppendItems of item %q", item), e.s.AppendItems(e.ctx, alice, "conv_ok", convItems("msg_new", item)))
	}
	e.wantItems(alice, "conv_ok", "msg_ok")
	for _, id := range badIDs {
		e.wantGoneConv(alice, id, "msg_ok")
		wantErr(t, fmt.Sprintf("AppendItems(%q)", id), e.s.AppendItems(e.ctx, alice, id, convItems("msg_new")), store.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteItem(%q)", id), e.s.DeleteItem(e.ctx, alice, id, "msg_ok"), store.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteConversation(%q)", id), e.s.DeleteConversation(e.ctx, alice, id), store.ErrNotFound)
		_, err := e.s.GetItem(e.ctx, alice, "conv_ok", id)
		wantErr(t, fmt.Sprintf("GetItem(conv_ok, %q)", id), err, store.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteItem(conv_ok, %q)", id), e.s.DeleteItem(e.ctx, alice, "conv_ok", id), store.ErrNotFound)
	}
	e.wantItems(alice, "conv_ok", "msg_ok")
}

// testConvConcurrentAppends: goroutines append batches to one
// conversation while readers read it: every batch lands exactly once and
// whole, each goroutine's in its order, and no read sees a batch in part.
func testConvConcurrentAppends(t *testing.T, f ConversationsFactory) {
	const workers, batches = 8, 15
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	e.create(alice, "conv_c", "", convItem("msg_first"))
	// check verifies one view of the conversation: no id twice, each
	// batch's two items whole and adjacent, each worker's batches in
	// order. It returns the number of items of the workers.
	check := func(what string, items []store.ConversationItem) int {
		seen := map[string]bool{}
		last := make([]int, workers)
		for i := range last {
			last[i] = -1
		}
		n := 0
		for i := 0; i < len(items); i++ {
			id := items[i].ID
			if seen[id] {
				t.Errorf("%s: %s twice", what, id)
				return n
			}
			seen[id] = true
			var w, b, j int
			if _, err := fmt.Sscanf(id, "msg_w%d_b%d_%d", &w, &b, &j); err != nil {
				continue // msg_first
			}
			if j != 0 || i+1 >= len(items) || items[i+1].ID != fmt.Sprintf("msg_w%d_b%d_1", w, b) {
				t.Errorf("%s: batch w%d b%d is not whole at %d", what, w, b, i)
				return n
			}
			if b <= last[w] {
				t.Errorf("%s: worker %d's batch %d after its batch %d", what, w, b, last[w])
			}
			last[w] = b
			i++
			seen[items[i].ID] = true
			n += 2
		}
		return n
	}
	stop := make(chan struct{})
	var readers, writers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				items, err := e.s.Items(e.ctx, alice, "conv_c")
				if err != nil {
					t.Errorf("Items during the appends: %v", err)
					return
				}
				check("a read during the appends", items)
			}
		})
	}
	for w := range workers {
		writers.Go(func() {
			for b := range batches {
				batch := convItems(fmt.Sprintf("msg_w%d_b%d_0", w, b), fmt.Sprintf("msg_w%d_b%d_1", w, b))
				if err := e.s.AppendItems(e.ctx, alice, "conv_c", batch); err != nil {
					t.Errorf("AppendItems: %v", err)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	final := e.items(alice, "conv_c")
	if n := check("the final items", final); n != workers*batches*2 || len(final) != n+1 || final[0].ID != "msg_first" {
		t.Errorf("the final items: %d of the workers' %d, %d in all", n, workers*batches*2, len(final))
	}
	for _, it := range final {
		if d := diffItem(it, convItem(it.ID)); d != "" {
			t.Errorf("item %s: %s", it.ID, d)
			break
		}
	}
	// Paging through gives the same order.
	var paged []string
	o := store.ListOptions{Order: "asc", Limit: 37}
	for {
		page, more := e.list(alice, "conv_c", o)
		paged = append(paged, page...)
		if !more {
			break
		}
		o.After = page[len(page)-1]
	}
	if !slices.Equal(paged, itemIDs(final)) {
		t.Errorf("paging asc gave %d items, not Items' order", len(paged))
	}
}

// testConvConcurrentRaces: racers cannot both get past a check — one id
// appended by many lands once, one item deleted by many is deleted once,
// the item and conversation bounds hold exactly.
func testConvConcurrentRaces(t *testing.T, f ConversationsFactory) {
	const racers = 10
	l := noLimits()
	l.Items = 25
	l.Conversations = 4
	e := newConvEnv(t, f, l)
	e.create(alice, "conv_r", "")

	var ok, dup, quota atomic.Int64
	tally := func(err error) {
		var d *store.DuplicateItemError
		var q *store.QuotaError
		switch {
		case err == nil:
			ok.Add(1)
		case errors.As(err, &d):
			dup.Add(1)
		case errors.As(err, &q):
			quota.Add(1)
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() { tally(e.s.AppendItems(e.ctx, alice, "conv_r", convItems("msg_same"))) })
	}
	wg.Wait()
	if ok.Load() != 1 || dup.Load() != racers-1 {
		t.Errorf("%d racers appending one id: %d appended, %d duplicates; want 1 and %d", racers, ok.Load(), dup.Load(), racers-1)
	}
	e.wantItems(alice, "conv_r", "msg_same")

	var deleted, notFound atomic.Int64
	for range racers {
		wg.Go(func() {
			err := e.s.DeleteItem(e.ctx, alice, "conv_r", "msg_same")
			switch {
			case err == nil:
				deleted.Add(1)
			case errors.Is(err, store.ErrNotFound):
				notFound.Add(1)
			default:
				t.Errorf("DeleteItem: %v", err)
			}
		})
	}
	wg.Wait()
	if deleted.Load() != 1 || notFound.Load() != racers-1 {
		t.Errorf("%d racers deleting one item: %d deleted, %d not found", racers, deleted.Load(), notFound.Load())
	}

	ok.Store(0)
	quota.Store(0)
	for r := range racers {
		wg.Go(func() {
			for k := range 4 {
				tally(e.s.AppendItems(e.ctx, alice, "conv_r", convItems(fmt.Sprintf("msg_%d_%d", r, k))))
			}
		})
	}
	wg.Wait()
	if ok.Load() != int64(l.Items) || quota.Load() != int64(racers*4-l.Items) {
		t.Errorf("%d appends racing for %d places: %d appended, %d refused", racers*4, l.Items, ok.Load(), quota.Load())
	}
	if n := len(e.items(alice, "conv_r")); n != l.Items {
		t.Errorf("%d items after the race, want %d", n, l.Items)
	}

	ok.Store(0)
	quota.Store(0)
	for r := range racers {
		wg.Go(func() {
			tally(e.s.PutConversation(e.ctx, store.Conversation{ID: fmt.Sprintf("conv_%d", r), Owner: alice}, convItems("msg_1")))
		})
	}
	wg.Wait()
	// conv_r is one of the four.
	if ok.Load() != int64(l.Conversations-1) || quota.Load() != int64(racers-l.Conversations+1) {
		t.Errorf("%d creates racing for %d places: %d created, %d refused", racers, l.Conversations-1, ok.Load(), quota.Load())
	}
}

// testConvDeleteUpdateRace: rounds of a create, then a DeleteConversation
// and an UpdateConversation racing. The delete always succeeds (the
// conversation exists until it runs) and the update either lands before
// it or finds nothing; either way the conversation is gone afterwards:
// an update never re-creates one, empty or not. The id is created anew
// each round, which an update that had brought it back would refuse
// (ErrExists). Creates of one id racing each other give one conversation,
// the others ErrExists.
func testConvDeleteUpdateRace(t *testing.T, f ConversationsFactory) {
	const rounds, racers = 40, 8
	e := newConvEnv(t, f, store.DefaultConversationLimits())
	var updated, missed int
	for r := range rounds {
		e.create(alice, "conv_race", `{"round":"0"}`, convItems("msg_1")...)
		var delErr, updErr error
		var wg sync.WaitGroup
		wg.Go(func() { delErr = e.s.DeleteConversation(e.ctx, alice, "conv_race") })
		wg.Go(func() {
			_, updErr = e.s.UpdateConversation(e.ctx, alice, "conv_race", json.RawMessage(fmt.Sprintf(`{"round":"%d"}`, r)))
		})
		wg.Wait()
		switch {
		case updErr == nil:
			updated++
		case errors.Is(updErr, store.ErrNotFound):
			missed++
		default:
			t.Fatalf("round %d: UpdateConversation: %v", r, updErr)
		}
		_, getErr := e.s.GetConversation(e.ctx, alice, "conv_race")
		switch {
		case delErr != nil && !errors.Is(delErr, store.ErrNotFound):
			t.Fatalf("round %d: DeleteConversation: %v", r, delErr)
		case delErr == nil && getErr == nil:
			t.Fatalf("round %d: the delete succeeded and the conversation exists (update: %v)", r, updErr)
		case !errors.Is(getErr, store.ErrNotFound):
			t.Fatalf("round %d: GetConversation after the race: %v", r, getErr)
		}
		e.wantGoneConv(alice, "conv_race", "msg_1")
	}
	t.Logf("%d rounds: the update landed before the delete %d times, found nothing %d times", rounds, updated, missed)

	var created, exists atomic.Int64
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			err := e.s.PutConversation(e.ctx, store.Conversation{ID: "conv_once", Owner: alice, Metadata: json.RawMessage(fmt.Sprintf(`{"by":"%d"}`, r))}, convItems(fmt.Sprintf("msg_%d", r)))
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, store.ErrExists):
				exists.Add(1)
			default:
				t.Errorf("PutConversation: %v", err)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 || exists.Load() != racers-1 {
		t.Fatalf("%d creates of one id: %d created, %d ErrExists; want 1 and %d", racers, created.Load(), exists.Load(), racers-1)
	}
	got, err := e.s.GetConversation(e.ctx, alice, "conv_once")
	if err != nil {
		t.Fatal(err)
	}
	var md struct{ By string }
	if err := json.Unmarshal(got.Metadata, &md); err != nil || md.By == "" {
		t.Fatalf("metadata %q: %v", got.Metadata, err)
	}
	e.wantItems(alice, "conv_once", "msg_"+md.By) // the winner's metadata with the winner's items
}
