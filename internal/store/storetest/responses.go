package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// ResponsesFactory makes an empty store.Responses bounded by l whose clock
// is now; whatever it holds must be released by the factory's cleanup
// (t.Cleanup). RunResponses takes one so the same cases run against
// every implementation.
type ResponsesFactory func(t *testing.T, l store.ResponseLimits, now func() time.Time) store.Responses

// RunResponses runs the store.Responses conformance suite against stores
// newStore makes. Count and Bytes are left to each implementation's own
// tests: a shared store does not apply them.
func RunResponses(t *testing.T, newStore ResponsesFactory) {
	tests := []struct {
		name string
		run  func(t *testing.T, f ResponsesFactory)
	}{
		{"RoundTrip", testResponseRoundTrip},
		{"Defaults", testResponseDefaults},
		{"Copies", testResponseCopies},
		{"OwnerScoping", testResponseOwners},
		{"GetResponses", testGetResponses},
		{"ReplaceReindexes", testResponseReplace},
		{"Delete", testResponseDelete},
		{"Expiry", testResponseExpiry},
		{"PutExpired", testResponsePutExpired},
		{"Quotas", testResponseQuotas},
		{"InvalidInput", testResponseInvalid},
		{"Concurrent", testResponsesConcurrent},
		{"ConcurrentReplace", testResponsesConcurrentReplace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

// respEnv is one test's Responses and clock.
type respEnv struct {
	t     *testing.T
	s     store.Responses
	clock *Clock
	ctx   context.Context
}

func newRespEnv(t *testing.T, f ResponsesFactory, l store.ResponseLimits) *respEnv {
	c := NewClock(Start())
	return &respEnv{t: t, s: f(t, l, c.Now), clock: c, ctx: context.Background()}
}

// response is owner's response id with one item per item id, each item's
// model view naming it, so a mix-up of items shows.
func response(owner, id string, items ...string) store.Response {
	r := store.Response{
		ID:         id,
		Owner:      owner,
		Object:     json.RawMessage(`{"id":"` + id + `","object":"response"}`),
		Input:      []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"hi"}`)},
		ModelInput: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
	}
	for _, it := range items {
		r.Items = append(r.Items, store.ResponseItem{ID: it, Model: []json.RawMessage{json.RawMessage(`{"id":"` + it + `"}`)}})
	}
	return r
}

func (e *respEnv) put(r store.Response) store.Response {
	e.t.Helper()
	if err := e.s.PutResponse(e.ctx, r); err != nil {
		e.t.Fatalf("PutResponse %s: %v", r.ID, err)
	}
	return r
}

func (e *respEnv) get(owner, id string) store.Response {
	e.t.Helper()
	r, err := e.s.GetResponse(e.ctx, owner, id)
	if err != nil {
		e.t.Fatalf("GetResponse %s: %v", id, err)
	}
	return r
}

// wantFound checks owner's FindItem(item) is the response id.
func (e *respEnv) wantFound(owner, item, id string) {
	e.t.Helper()
	r, err := e.s.FindItem(e.ctx, owner, item)
	if err != nil || r.ID != id {
		e.t.Errorf("FindItem(%s, %s) = %s, %v; want %s", owner, item, r.ID, err, id)
	}
}

// wantGone checks owner's response id and its items do not exist for
// GetResponse, GetResponses and FindItem.
func (e *respEnv) wantGone(owner, id string, items ...string) {
	e.t.Helper()
	_, err := e.s.GetResponse(e.ctx, owner, id)
	wantErr(e.t, "GetResponse "+id, err, store.ErrNotFound)
	_, err = e.s.GetResponses(e.ctx, owner, []string{id})
	wantErr(e.t, "GetResponses "+id, err, store.ErrNotFound)
	for _, it := range items {
		_, err := e.s.FindItem(e.ctx, owner, it)
		wantErr(e.t, "FindItem "+it+" of "+id, err, store.ErrNotFound)
	}
}

// diffResponse names the fields in which got differs from want, "" for
// none. Times compare as instants; a nil and an empty slice are alike;
// raw messages compare byte for byte.
func diffResponse(got, want store.Response) string {
	norm := func(r store.Response) store.Response {
		r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
		if len(r.History) == 0 {
			r.History = nil
		}
		if len(r.Object) == 0 {
			r.Object = nil
		}
		if len(r.Input) == 0 {
			r.Input = nil
		}
		if len(r.ModelInput) == 0 {
			r.ModelInput = nil
		}
		if len(r.Pending) == 0 {
			r.Pending = nil
		}
		if len(r.Items) == 0 {
			r.Items = nil
		}
		items := make([]store.ResponseItem, len(r.Items))
		for i, it := range r.Items {
			if len(it.Model) == 0 {
				it.Model = nil
			}
			items[i] = it
		}
		if r.Items != nil {
			r.Items = items
		}
		return r
	}
	g, w := reflect.ValueOf(norm(got)), reflect.ValueOf(norm(want))
	var diff []string
	for i := range g.NumField() {
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			diff = append(diff, fmt.Sprintf("%s: got %s, want %s", g.Type().Field(i).Name, show(g.Field(i)), show(w.Field(i))))
		}
	}
	return strings.Join(diff, "; ")
}

// show prints a field, raw messages as text.
func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case json.RawMessage:
		return fmt.Sprintf("%q", x)
	case []json.RawMessage:
		return fmt.Sprintf("%q", x)
	case []store.ResponseItem:
		var parts []string
		for _, it := range x {
			parts = append(parts, fmt.Sprintf("{%s %q}", it.ID, it.Model))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprintf("%v", v.Interface())
}

func (e *respEnv) wantEqual(what string, got, want store.Response) {
	e.t.Helper()
	if d := diffResponse(got, want); d != "" {
		e.t.Errorf("%s: %s", what, d)
	}
}

// deepCopy copies every slice of r, for comparing with what a store holds
// after the caller's r was changed.
func deepCopy(r store.Response) store.Response {
	r.History = slices.Clone(r.History)
	r.Object = slices.Clone(r.Object)
	raws := func(in []json.RawMessage) []json.RawMessage {
		var out []json.RawMessage
		for _, m := range in {
			out = append(out, slices.Clone(m))
		}
		return out
	}
	r.Input, r.ModelInput, r.Pending = raws(r.Input), raws(r.ModelInput), raws(r.Pending)
	var items []store.ResponseItem
	for _, it := range r.Items {
		items = append(items, store.ResponseItem{ID: it.ID, Model: raws(it.Model)})
	}
	r.Items = items
	return r
}

// testResponseRoundTrip: every field comes back as it was put, the raw
// messages byte for byte — their spacing, escapes and the characters
// encoding/json would escape (<, >, &) included.
func testResponseRoundTrip(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	now := e.clock.Now()
	first := e.put(response(alice, idgen.New("resp_"), idgen.New("msg_")))
	prev := e.put(response(alice, idgen.New("resp_"), idgen.New("msg_")))
	r := store.Response{
		ID:             idgen.New("resp_"),
		Owner:          alice,
		CreatedAt:      now.Add(123456789 * time.Nanosecond),
		ExpiresAt:      now.Add(90*time.Minute + 5*time.Millisecond),
		Previous:       prev.ID,
		History:        []string{first.ID, prev.ID},
		UpstreamID:     "resp_upstream-1.a",
		UpstreamStored: true,
		ContainerID:    "cntr_abc",
		Object: json.RawMessage("{\"id\": \"x\",\n  \"text\": \"<b>a & b</b> \\u00e9 é \\\"q\\\"\",\t\"n\": 1.50e0, " +
			"\"output\": [ ] }"),
		Input: []json.RawMessage{
			json.RawMessage(`{ "type" : "message", "content": "<script>" }`),
			json.RawMessage(`"a string item"`),
		},
		ModelInput: []json.RawMessage{json.RawMessage(`{"role":"user",   "content":"\u003c&\u003e"}`)},
		Pending:    []json.RawMessage{json.RawMessage(`{"type":"function_call_output", "call_id":"call_9","output":"<owed>"}`)},
		Items: []store.ResponseItem{
			{ID: "ci_1", Model: []json.RawMessage{
				json.RawMessage(`{"type":"function_call", "call_id":"call_1"}`),
				json.RawMessage(`{"type":"function_call_output","output":"1 < 2\n"}`),
			}},
			{ID: "msg_2", Model: []json.RawMessage{json.RawMessage(`{"type":"message"}`)}},
			{Model: []json.RawMessage{json.RawMessage(`{"type":"reasoning"}`)}},
		},
	}
	want := deepCopy(r)
	e.put(r)
	e.wantEqual("GetResponse", e.get(alice, r.ID), want)
	got, err := e.s.GetResponses(e.ctx, alice, []string{r.ID})
	if err != nil || len(got) != 1 {
		t.Fatalf("GetResponses = %d responses, %v", len(got), err)
	}
	e.wantEqual("GetResponses", got[0], want)
	for _, item := range []string{"ci_1", "msg_2"} {
		got, err := e.s.FindItem(e.ctx, alice, item)
		if err != nil {
			t.Fatalf("FindItem %s: %v", item, err)
		}
		e.wantEqual("FindItem "+item, got, want)
	}
	// The item without an id is not indexed under "".
	_, err = e.s.FindItem(e.ctx, alice, "")
	wantErr(t, `FindItem("")`, err, store.ErrNotFound)
}

// testResponseDefaults: CreatedAt defaults to now, ExpiresAt to
// CreatedAt+TTL; an explicit ExpiresAt stays; with no TTL a response
// never expires.
func testResponseDefaults(t *testing.T, f ResponsesFactory) {
	l := store.DefaultResponseLimits()
	l.TTL = time.Hour
	e := newRespEnv(t, f, l)
	now := e.clock.Now()
	a := e.put(response(alice, idgen.New("resp_")))
	got := e.get(alice, a.ID)
	if !got.CreatedAt.Equal(now) || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("defaults: created %v, expires %v; want %v, %v", got.CreatedAt, got.ExpiresAt, now, now.Add(time.Hour))
	}
	b := response(alice, idgen.New("resp_"))
	b.CreatedAt = now.Add(-10 * time.Minute)
	e.put(b)
	if got := e.get(alice, b.ID); !got.CreatedAt.Equal(b.CreatedAt) || !got.ExpiresAt.Equal(b.CreatedAt.Add(time.Hour)) {
		t.Errorf("given CreatedAt: created %v, expires %v; want %v, %v", got.CreatedAt, got.ExpiresAt, b.CreatedAt, b.CreatedAt.Add(time.Hour))
	}
	c := response(alice, idgen.New("resp_"))
	c.ExpiresAt = now.Add(3 * time.Hour)
	e.put(c)
	if got := e.get(alice, c.ID); !got.ExpiresAt.Equal(c.ExpiresAt) {
		t.Errorf("given ExpiresAt: %v, want %v", got.ExpiresAt, c.ExpiresAt)
	}

	l.TTL = 0
	e2 := newRespEnv(t, f, l)
	d := e2.put(response(alice, idgen.New("resp_"), "msg_forever"))
	if got := e2.get(alice, d.ID); !got.ExpiresAt.IsZero() {
		t.Errorf("no TTL: ExpiresAt %v, want none", got.ExpiresAt)
	}
	e2.clock.Advance(10 * 365 * 24 * time.Hour)
	e2.get(alice, d.ID)
	e2.wantFound(alice, "msg_forever", d.ID)
}

// testResponseCopies: the store keeps its own copy; neither the caller's
// later changes to what it put nor its changes to what it got reach it.
func testResponseCopies(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	r := response(alice, idgen.New("resp_"), "msg_1")
	r.History = []string{"resp_h"}
	want := deepCopy(r)
	e.put(r)
	mutate := func(r store.Response) {
		r.Object[0] = 'X'
		r.Input[0][0] = 'X'
		r.ModelInput[0][0] = 'X'
		r.History[0] = "resp_changed"
		r.Items[0].ID = "msg_changed"
		r.Items[0].Model[0][0] = 'X'
	}
	mutate(r)
	want.CreatedAt, want.ExpiresAt = e.clock.Now(), e.clock.Now().Add(store.DefaultResponseLimits().TTL)
	e.wantEqual("after changing what was put", e.get(alice, r.ID), want)
	mutate(e.get(alice, r.ID))
	e.wantEqual("after changing what was got", e.get(alice, r.ID), want)
	got, err := e.s.GetResponses(e.ctx, alice, []string{r.ID})
	if err != nil {
		t.Fatal(err)
	}
	mutate(got[0])
	got2, err := e.s.FindItem(e.ctx, alice, "msg_1")
	if err != nil {
		t.Fatal(err)
	}
	e.wantEqual("after changing what GetResponses gave", got2, want)
	mutate(got2)
	e.wantEqual("after changing what FindItem gave", e.get(alice, r.ID), want)
}

// testResponseOwners: another owner's response does not exist, its items
// cannot be found, it cannot be deleted, and the same ids are the other
// owner's own.
func testResponseOwners(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	a := e.put(response(alice, "resp_same", "msg_same"))
	_, err := e.s.GetResponse(e.ctx, bob, a.ID)
	wantErr(t, "bob's GetResponse", err, store.ErrNotFound)
	_, err = e.s.GetResponses(e.ctx, bob, []string{a.ID})
	wantErr(t, "bob's GetResponses", err, store.ErrNotFound)
	_, err = e.s.FindItem(e.ctx, bob, "msg_same")
	wantErr(t, "bob's FindItem", err, store.ErrNotFound)
	wantErr(t, "bob's DeleteResponse", e.s.DeleteResponse(e.ctx, bob, a.ID), store.ErrNotFound)
	e.get(alice, a.ID)
	e.wantFound(alice, "msg_same", a.ID)

	// Bob's response of the same id, with an item of the same id, is his.
	b := response(bob, "resp_same", "msg_same")
	b.Object = json.RawMessage(`{"owner":"bob"}`)
	e.put(b)
	if got := e.get(alice, a.ID); string(got.Object) != string(a.Object) {
		t.Errorf("alice's response after bob's put: %s", got.Object)
	}
	if got := e.get(bob, b.ID); string(got.Object) != string(b.Object) {
		t.Errorf("bob's response: %s", got.Object)
	}
	if got, err := e.s.FindItem(e.ctx, alice, "msg_same"); err != nil || got.Owner != alice {
		t.Errorf("alice's FindItem after bob's put: owner %q, %v", got.Owner, err)
	}
	if got, err := e.s.FindItem(e.ctx, bob, "msg_same"); err != nil || got.Owner != bob {
		t.Errorf("bob's FindItem: owner %q, %v", got.Owner, err)
	}
	if err := e.s.DeleteResponse(e.ctx, bob, b.ID); err != nil {
		t.Fatal(err)
	}
	e.get(alice, a.ID)
	e.wantFound(alice, "msg_same", a.ID)
	e.wantGone(bob, b.ID, "msg_same")
}

// testGetResponses: responses come back in the order asked (repeats
// too); a missing one is ErrNotFound naming the first missing id.
func testGetResponses(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	var ids []string
	want := map[string]store.Response{}
	for i := range 3 {
		r := response(alice, fmt.Sprintf("resp_%d", i), fmt.Sprintf("msg_%d", i))
		r.Object = json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))
		want[r.ID] = deepCopy(e.put(r))
		ids = append(ids, r.ID)
	}
	ask := []string{ids[2], ids[0], ids[1], ids[0]}
	got, err := e.s.GetResponses(e.ctx, alice, ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ask) {
		t.Fatalf("GetResponses gave %d responses, want %d", len(got), len(ask))
	}
	for i, id := range ask {
		w := want[id]
		w.CreatedAt, w.ExpiresAt = got[i].CreatedAt, got[i].ExpiresAt
		e.wantEqual(fmt.Sprintf("GetResponses[%d]", i), got[i], w)
	}
	if got, err := e.s.GetResponses(e.ctx, alice, nil); err != nil || len(got) != 0 {
		t.Errorf("GetResponses(nil) = %d responses, %v", len(got), err)
	}
	_, err = e.s.GetResponses(e.ctx, alice, []string{ids[0], "resp_missing1", ids[1], "resp_missing2"})
	wantErr(t, "GetResponses with missing ids", err, store.ErrNotFound)
	if err != nil && (!strings.Contains(err.Error(), "resp_missing1") || strings.Contains(err.Error(), "resp_missing2")) {
		t.Errorf("GetResponses error %q: want it to name resp_missing1 (the first missing) only", err)
	}
	_, err = e.s.GetResponses(e.ctx, alice, []string{ids[0], "resp_{x}:y"})
	wantErr(t, "GetResponses with an invalid id", err, store.ErrNotFound)
}

// testResponseReplace: a put of a stored id replaces it, and its items'
// index with it; an item id another response took over stays that one's.
func testResponseReplace(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	a := e.put(response(alice, "resp_a", "msg_old", "msg_kept"))
	b := e.put(response(alice, "resp_b", "msg_shared"))
	e.wantFound(alice, "msg_old", a.ID)

	a2 := response(alice, a.ID, "msg_kept", "msg_new")
	a2.Object = json.RawMessage(`{"version":2}`)
	e.put(a2)
	if got := e.get(alice, a.ID); string(got.Object) != `{"version":2}` || len(got.Items) != 2 || got.Items[1].ID != "msg_new" {
		t.Errorf("after the replace: %s, items %s", got.Object, show(reflect.ValueOf(got.Items)))
	}
	_, err := e.s.FindItem(e.ctx, alice, "msg_old")
	wantErr(t, "FindItem of an item the replacement lacks", err, store.ErrNotFound)
	e.wantFound(alice, "msg_kept", a.ID)
	e.wantFound(alice, "msg_new", a.ID)
	if got, err := e.s.FindItem(e.ctx, alice, "msg_new"); err == nil && string(got.Object) != `{"version":2}` {
		t.Errorf("FindItem gave the old version: %s", got.Object)
	}

	// a takes msg_shared over from b; then a drops it: b's claim on it
	// was gone already, and a's goes.
	e.put(response(alice, a.ID, "msg_kept", "msg_shared"))
	e.wantFound(alice, "msg_shared", a.ID)
	e.put(response(alice, b.ID, "msg_shared", "msg_b"))
	e.wantFound(alice, "msg_shared", b.ID)
	e.put(response(alice, a.ID, "msg_kept"))
	e.wantFound(alice, "msg_shared", b.ID) // a's replace must not drop b's entry
	if err := e.s.DeleteResponse(e.ctx, alice, a.ID); err != nil {
		t.Fatal(err)
	}
	e.wantFound(alice, "msg_shared", b.ID) // nor a's delete
	e.wantFound(alice, "msg_b", b.ID)
}

// testResponseDelete: a deleted response and its items are gone; the
// rest of its chain stays, but a chain through it no longer expands.
func testResponseDelete(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	r1 := e.put(response(alice, "resp_1", "msg_1"))
	r2 := response(alice, "resp_2", "ci_2", "msg_2")
	r2.Previous, r2.History = r1.ID, []string{r1.ID}
	e.put(r2)
	r3 := response(alice, "resp_3", "msg_3")
	r3.Previous, r3.History = r2.ID, []string{r1.ID, r2.ID}
	e.put(r3)

	if err := e.s.DeleteResponse(e.ctx, alice, r2.ID); err != nil {
		t.Fatal(err)
	}
	e.wantGone(alice, r2.ID, "ci_2", "msg_2")
	e.get(alice, r1.ID)
	e.wantFound(alice, "msg_1", r1.ID)
	if got := e.get(alice, r3.ID); got.Previous != r2.ID || !slices.Equal(got.History, r3.History) {
		t.Errorf("the later response changed: previous %q, history %v", got.Previous, got.History)
	}
	e.wantFound(alice, "msg_3", r3.ID)
	_, err := e.s.GetResponses(e.ctx, alice, r3.History)
	wantErr(t, "GetResponses of a chain through a deleted response", err, store.ErrNotFound)
	if err != nil && !strings.Contains(err.Error(), r2.ID) {
		t.Errorf("GetResponses error %q does not name %s", err, r2.ID)
	}
	wantErr(t, "DeleteResponse again", e.s.DeleteResponse(e.ctx, alice, r2.ID), store.ErrNotFound)
	wantErr(t, "DeleteResponse of a response never stored", e.s.DeleteResponse(e.ctx, alice, "resp_never"), store.ErrNotFound)

	// The id can be used again.
	e.put(response(alice, r2.ID, "msg_again"))
	e.wantFound(alice, "msg_again", r2.ID)
	_, err = e.s.FindItem(e.ctx, alice, "ci_2")
	wantErr(t, "FindItem of the deleted version's item", err, store.ErrNotFound)
}

// testResponseExpiry: a response exists until its ExpiresAt, exactly, on
// the store's clock; then it does not, for every method.
func testResponseExpiry(t *testing.T, f ResponsesFactory) {
	l := store.DefaultResponseLimits()
	l.TTL = time.Hour
	e := newRespEnv(t, f, l)
	t0 := e.clock.Now()
	r1 := e.put(response(alice, "resp_1", "msg_1"))
	r2 := response(alice, "resp_2", "msg_2")
	r2.ExpiresAt = t0.Add(10 * time.Minute)
	e.put(r2)
	r3 := response(alice, "resp_3", "msg_3")
	r3.CreatedAt = t0.Add(-30 * time.Minute) // expires at t0+30m
	e.put(r3)
	all := []string{r1.ID, r2.ID, r3.ID}

	e.clock.Advance(10*time.Minute - time.Second)
	if got, err := e.s.GetResponses(e.ctx, alice, all); err != nil || len(got) != 3 {
		t.Fatalf("a second before the first expiry: %d responses, %v", len(got), err)
	}
	e.clock.Advance(time.Second)
	e.wantGone(alice, r2.ID, "msg_2")
	wantErr(t, "DeleteResponse of an expired response", e.s.DeleteResponse(e.ctx, alice, r2.ID), store.ErrNotFound)
	_, err := e.s.GetResponses(e.ctx, alice, all)
	wantErr(t, "GetResponses with an expired response", err, store.ErrNotFound)
	e.get(alice, r1.ID)
	e.wantFound(alice, "msg_3", r3.ID)

	e.clock.Advance(20 * time.Minute) // t0+30m
	e.wantGone(alice, r3.ID, "msg_3")
	e.get(alice, r1.ID)

	e.clock.Advance(30 * time.Minute) // t0+1h
	e.wantGone(alice, r1.ID, "msg_1")
	wantErr(t, "DeleteResponse after the TTL", e.s.DeleteResponse(e.ctx, alice, r1.ID), store.ErrNotFound)

	// An id whose response expired can be stored anew.
	e.put(response(alice, r1.ID, "msg_1b"))
	e.wantFound(alice, "msg_1b", r1.ID)
	_, err = e.s.FindItem(e.ctx, alice, "msg_1")
	wantErr(t, "FindItem of the expired version's item", err, store.ErrNotFound)
}

// testResponsePutExpired: a response already expired when put is not
// stored, and replaces a stored one by nothing.
func testResponsePutExpired(t *testing.T, f ResponsesFactory) {
	l := store.DefaultResponseLimits()
	l.TTL = time.Hour
	e := newRespEnv(t, f, l)
	now := e.clock.Now()
	r := response(alice, "resp_past", "msg_past")
	r.ExpiresAt = now.Add(-time.Second)
	e.put(r)
	e.wantGone(alice, r.ID, "msg_past")
	old := response(alice, "resp_old", "msg_old")
	old.CreatedAt = now.Add(-time.Hour) // CreatedAt+TTL is now: expired
	e.put(old)
	e.wantGone(alice, old.ID, "msg_old")

	live := e.put(response(alice, "resp_live", "msg_live"))
	e.wantFound(alice, "msg_live", live.ID)
	gone := response(alice, live.ID, "msg_live")
	gone.ExpiresAt = now
	e.put(gone)
	e.wantGone(alice, live.ID, "msg_live")
}

// sized is a response of exactly n bytes (Response.Size) with History h.
func sized(owner, id string, n int, h []string) store.Response {
	r := store.Response{ID: id, Owner: owner, History: h}
	if n >= 2 {
		r.Object = json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
	}
	return r
}

// testResponseQuotas: ResponseBytes and MaxHistory are QuotaErrors, at one
// past the bound, and nothing is stored (a replacement leaves the old
// version).
func testResponseQuotas(t *testing.T, f ResponsesFactory) {
	l := store.DefaultResponseLimits()
	l.ResponseBytes = 100
	l.MaxHistory = 3
	e := newRespEnv(t, f, l)
	e.put(sized(alice, "resp_fits", 100, nil))
	err := e.s.PutResponse(e.ctx, sized(alice, "resp_big", 101, nil))
	wantQuota(t, "a response of 101 bytes", err, store.LimitResponseBytes)
	var q *store.QuotaError
	if errors.As(err, &q) && q.Max != 100 {
		t.Errorf("QuotaError.Max %d, want 100", q.Max)
	}
	e.wantGone(alice, "resp_big")

	// Size counts every raw message and the item ids.
	r := store.Response{ID: "resp_items", Owner: alice, Object: json.RawMessage(`{}`),
		Input: []json.RawMessage{json.RawMessage(`"in"`)}, ModelInput: []json.RawMessage{json.RawMessage(`"model in"`)},
		Items: []store.ResponseItem{{ID: "msg_1", Model: []json.RawMessage{json.RawMessage(`"a"`)}}}}
	e.put(r)
	r.Items = append(r.Items, store.ResponseItem{ID: "msg_2", Model: []json.RawMessage{json.RawMessage(`"` + strings.Repeat("y", int(101-r.Size())-len("msg_2")-2) + `"`)}})
	if r.Size() != 101 {
		t.Fatalf("test response of %d bytes, want 101", r.Size())
	}
	wantQuota(t, "a replacement of 101 bytes", e.s.PutResponse(e.ctx, r), store.LimitResponseBytes)
	if got := e.get(alice, r.ID); len(got.Items) != 1 {
		t.Errorf("the refused replacement changed the response: %d items", len(got.Items))
	}
	_, err = e.s.FindItem(e.ctx, alice, "msg_2")
	wantErr(t, "FindItem of the refused replacement's item", err, store.ErrNotFound)
	e.wantFound(alice, "msg_1", r.ID)

	e.put(sized(alice, "resp_h3", 10, []string{"resp_a", "resp_b", "resp_c"}))
	err = e.s.PutResponse(e.ctx, sized(alice, "resp_h4", 10, []string{"resp_a", "resp_b", "resp_c", "resp_d"}))
	wantQuota(t, "a history of 4", err, store.LimitHistory)
	if errors.As(err, &q) && q.Max != 3 {
		t.Errorf("QuotaError.Max %d, want 3", q.Max)
	}
	e.wantGone(alice, "resp_h4")
}

// testResponseInvalid: ids a store cannot hold are refused on put and not
// found everywhere else; an item id that is not one is kept, unindexed.
func testResponseInvalid(t *testing.T, f ResponsesFactory) {
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	long := "resp_" + strings.Repeat("x", 124)
	bad := []struct {
		what string
		r    store.Response
	}{
		{"empty id", response(alice, "")},
		{"id with a space", response(alice, "resp a")},
		{"id with key syntax", response(alice, "resp_{x}:y")},
		{"id with a slash", response(alice, "../resp")},
		{"id of 129 bytes", response(alice, long)},
		{"no owner", response("", "resp_noowner")},
		{"invalid previous", func() store.Response {
			r := response(alice, "resp_prev")
			r.Previous = "resp:x"
			return r
		}()},
		{"invalid history", func() store.Response {
			r := response(alice, "resp_hist")
			r.History = []string{"resp_ok", "resp x"}
			return r
		}()},
	}
	for _, b := range bad {
		var q *store.QuotaError
		err := e.s.PutResponse(e.ctx, b.r)
		if err == nil || errors.As(err, &q) {
			t.Errorf("PutResponse with %s: %v, want an error", b.what, err)
		}
		if store.ValidID(b.r.ID) && b.r.Owner != "" {
			e.wantGone(alice, b.r.ID)
		}
	}
	if len(long) != 129 {
		t.Fatalf("long id of %d bytes", len(long))
	}
	r := e.put(response(alice, "resp_ok", "msg_ok", "msg:odd", "msg odd"))
	for _, id := range []string{"", "a b", "../x", "x:y", "{x}", long} {
		_, err := e.s.GetResponse(e.ctx, alice, id)
		wantErr(t, fmt.Sprintf("GetResponse(%q)", id), err, store.ErrNotFound)
		_, err = e.s.GetResponses(e.ctx, alice, []string{r.ID, id})
		wantErr(t, fmt.Sprintf("GetResponses(%q)", id), err, store.ErrNotFound)
		_, err = e.s.FindItem(e.ctx, alice, id)
		wantErr(t, fmt.Sprintf("FindItem(%q)", id), err, store.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteResponse(%q)", id), e.s.DeleteResponse(e.ctx, alice, id), store.ErrNotFound)
	}
	got := e.get(alice, r.ID)
	if len(got.Items) != 3 || got.Items[1].ID != "msg:odd" || got.Items[2].ID != "msg odd" {
		t.Errorf("items with odd ids: %s", show(reflect.ValueOf(got.Items)))
	}
	e.wantFound(alice, "msg_ok", r.ID)
	_, err := e.s.FindItem(e.ctx, alice, "msg:odd")
	wantErr(t, "FindItem of an item id that is not a ValidID", err, store.ErrNotFound)
}

// testResponsesConcurrent: owners' goroutines put, read, find and delete
// their own responses at once; each sees exactly its own.
func testResponsesConcurrent(t *testing.T, f ResponsesFactory) {
	const workers, each = 8, 15
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	var wg sync.WaitGroup
	for w := range workers {
		owner := fmt.Sprintf("o_w%d", w%3)
		wg.Go(func() {
			var mine []string
			for i := range each {
				id := fmt.Sprintf("resp_w%d_%d", w, i)
				item := fmt.Sprintf("msg_w%d_%d", w, i)
				r := response(owner, id, item)
				if len(mine) > 0 {
					r.Previous, r.History = mine[len(mine)-1], slices.Clone(mine)
				}
				if err := e.s.PutResponse(e.ctx, r); err != nil {
					t.Errorf("PutResponse %s: %v", id, err)
					return
				}
				mine = append(mine, id)
				if got, err := e.s.GetResponse(e.ctx, owner, id); err != nil || len(got.Items) != 1 || got.Items[0].ID != item {
					t.Errorf("GetResponse %s: %v", id, err)
				}
				if got, err := e.s.FindItem(e.ctx, owner, item); err != nil || got.ID != id {
					t.Errorf("FindItem %s = %s, %v", item, got.ID, err)
				}
				if got, err := e.s.GetResponses(e.ctx, owner, r.History); err != nil || len(got) != len(r.History) {
					t.Errorf("GetResponses of %s's history: %d, %v", id, len(got), err)
				}
			}
			for i := 0; i < each; i += 2 {
				if err := e.s.DeleteResponse(e.ctx, owner, mine[i]); err != nil {
					t.Errorf("DeleteResponse %s: %v", mine[i], err)
				}
			}
		})
	}
	wg.Wait()
	for w := range workers {
		owner := fmt.Sprintf("o_w%d", w%3)
		for i := range each {
			id := fmt.Sprintf("resp_w%d_%d", w, i)
			_, err := e.s.GetResponse(e.ctx, owner, id)
			if i%2 == 0 {
				wantErr(t, "GetResponse of deleted "+id, err, store.ErrNotFound)
			} else if err != nil {
				t.Errorf("GetResponse %s: %v", id, err)
			}
			_, err = e.s.GetResponse(e.ctx, fmt.Sprintf("o_w%d", (w+1)%3), id)
			wantErr(t, "another owner's GetResponse "+id, err, store.ErrNotFound)
		}
	}
}

// testResponsesConcurrentReplace: racers replace one response, each with
// items of its own, while readers read it: every read is one whole
// version, and afterwards exactly the last version's items are found.
func testResponsesConcurrentReplace(t *testing.T, f ResponsesFactory) {
	const racers, rounds = 6, 12
	e := newRespEnv(t, f, store.DefaultResponseLimits())
	const id = "resp_contended"
	item := func(g, k, j int) string { return fmt.Sprintf("msg_%d_%d_%d", g, k, j) }
	version := func(g, k int) store.Response {
		r := response(alice, id, item(g, k, 0), item(g, k, 1), "msg_common")
		r.Object = json.RawMessage(fmt.Sprintf(`{"v":"%d_%d"}`, g, k))
		return r
	}
	e.put(version(0, 0))
	stop := make(chan struct{})
	var readers, writers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := e.s.GetResponse(e.ctx, alice, id)
				if err != nil {
					t.Errorf("GetResponse during the race: %v", err)
					return
				}
				var v struct{ V string }
				if err := json.Unmarshal(r.Object, &v); err != nil || len(r.Items) != 3 ||
					r.Items[0].ID != "msg_"+v.V+"_0" || r.Items[1].ID != "msg_"+v.V+"_1" {
					t.Errorf("a torn read: object %s, items %s", r.Object, show(reflect.ValueOf(r.Items)))
					return
				}
			}
		})
	}
	for g := range racers {
		writers.Go(func() {
			for k := range rounds {
				if err := e.s.PutResponse(e.ctx, version(g, k)); err != nil {
					t.Errorf("PutResponse: %v", err)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()

	final := e.get(alice, id)
	e.wantFound(alice, "msg_common", id)
	live := map[string]bool{}
	for _, it := range final.Items {
		live[it.ID] = true
	}
	for g := range racers {
		for k := range rounds {
			for j := range 2 {
				it := item(g, k, j)
				got, err := e.s.FindItem(e.ctx, alice, it)
				switch {
				case live[it] && (err != nil || got.ID != id):
					t.Errorf("FindItem of the final version's %s: %s, %v", it, got.ID, err)
				case !live[it] && !errors.Is(err, store.ErrNotFound):
					t.Errorf("FindItem of a replaced version's %s: %s, %v; want ErrNotFound", it, got.ID, err)
				}
			}
		}
	}
	if err := e.s.DeleteResponse(e.ctx, alice, id); err != nil {
		t.Fatal(err)
	}
	e.wantGone(alice, id, "msg_common", final.Items[0].ID)
}
