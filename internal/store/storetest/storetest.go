// Package storetest is the conformance suite every store.Store
// implementation must pass: one table of behaviours, run against the
// in-process store and against Redis, so callers can rely on the
// interface and not on an implementation.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Factory makes an empty store bounded by l whose clock is now. The store
// must be closed by the factory's cleanup (t.Cleanup).
type Factory func(t *testing.T, l store.Limits, now func() time.Time) store.Store

// Clock is a fake clock tests move by hand; safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Start is where suite clocks start: the current second, so that TTLs
// the backend computes from the fake clock stay sensible.
func Start() time.Time { return time.Unix(time.Now().Unix(), 0) }

const (
	alice = "o_alice"
	bob   = "o_bob"
)

// env is one test's store and clock.
type env struct {
	t     *testing.T
	s     store.Store
	clock *Clock
	ctx   context.Context
}

func newEnv(t *testing.T, f Factory, l store.Limits) *env {
	c := NewClock(Start())
	return &env{t: t, s: f(t, l, c.Now), clock: c, ctx: context.Background()}
}

// container creates a live container of owner (20 minutes, as OpenAI's
// default) and returns it.
func (e *env) container(owner, name string) store.Container {
	e.t.Helper()
	now := e.clock.Now().Unix()
	c := store.Container{
		ID: idgen.New("cntr_"), Owner: owner, Name: name, CreatedAt: now, LastActiveAt: now,
		ExpiresAfterMinutes: 20, MemoryLimit: "1g",
	}
	if err := e.s.PutContainer(e.ctx, c); err != nil {
		e.t.Fatalf("PutContainer: %v", err)
	}
	return c
}

func (e *env) file(owner, cid, path string, data []byte) store.File {
	e.t.Helper()
	f, err := e.s.PutFile(e.ctx, store.File{Owner: owner, ContainerID: cid, Path: path, Source: "user"}, data)
	if err != nil {
		e.t.Fatalf("PutFile %s: %v", path, err)
	}
	return f
}

func (e *env) apiFile(owner, name string, data []byte) store.File {
	e.t.Helper()
	f, err := e.s.PutFile(e.ctx, store.File{Owner: owner, Filename: name, Purpose: "assistants"}, data)
	if err != nil {
		e.t.Fatalf("PutFile (Files API) %s: %v", name, err)
	}
	return f
}

func (e *env) listContainers(owner string, o store.ListOptions) ([]store.Container, bool) {
	e.t.Helper()
	page, more, err := e.s.ListContainers(e.ctx, owner, o)
	if err != nil {
		e.t.Fatalf("ListContainers(%+v): %v", o, err)
	}
	return page, more
}

func (e *env) listFiles(owner, cid string, o store.ListOptions) ([]store.File, bool) {
	e.t.Helper()
	page, more, err := e.s.ListFiles(e.ctx, owner, cid, o)
	if err != nil {
		e.t.Fatalf("ListFiles(%s, %+v): %v", cid, o, err)
	}
	return page, more
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

func wantQuota(t *testing.T, what string, err error, limit string) {
	t.Helper()
	var q *store.QuotaError
	if !errors.As(err, &q) {
		t.Fatalf("%s: error %v, want a QuotaError for %s", what, err, limit)
	}
	if q.Limit != limit {
		t.Errorf("%s: QuotaError for %s, want %s", what, q.Limit, limit)
	}
}

// binary is every byte value, NULs included, twice.
func binary() []byte {
	b := make([]byte, 512)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// Run runs the suite against stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		run  func(t *testing.T, f Factory)
	}{
		{"Containers", testContainers},
		{"OwnerIsolation", testOwnerIsolation},
		{"ContainerPagination", testContainerPagination},
		{"ListLimits", testListLimits},
		{"NameFilter", testNameFilter},
		{"FilePagination", testFilePagination},
		{"TouchRefreshesExpiry", testTouch},
		{"Expiry", testExpiry},
		{"ExpiredKeptAndRevived", testRevive},
		{"Files", testFiles},
		{"FilesAPISeparate", testFilesAPISeparate},
		{"FileLifetime", testFileLifetime},
		{"DeleteContainerFreesFiles", testDeleteContainerFrees},
		{"Quotas", testQuotas},
		{"ConcurrentOwnerContainers", testConcurrentContainers},
		{"ConcurrentOwnerBytes", testConcurrentBytes},
		{"InvalidInput", testInvalidInput},
		{"PathsFormATree", testPathsFormATree},
		{"Revisions", testRevisions},
		{"Origin", testOrigin},
		{"OwnerBytes", testOwnerBytes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

func testContainers(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "one")
	got, err := e.s.GetContainer(e.ctx, alice, c.ID)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("GetContainer = %+v, %v; want %+v", got, err, c)
	}
	page, more := e.listContainers(alice, store.ListOptions{})
	if len(page) != 1 || !reflect.DeepEqual(page[0], c) || more {
		t.Fatalf("ListContainers = %+v, %v; want [%+v]", page, more, c)
	}
	// Replacing keeps the files; the container's skills are kept in its
	// record.
	fl := e.file(alice, c.ID, "/mnt/data/a.txt", []byte("a"))
	c.Name = "renamed"
	c.Skills = []store.ContainerSkill{{SkillID: "skill_1", Version: 2, Name: "csv-report", Description: "Summarise a CSV."}}
	if err := e.s.PutContainer(e.ctx, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.GetContainer(e.ctx, alice, c.ID); got.Name != "renamed" || !reflect.DeepEqual(got.Skills, c.Skills) {
		t.Errorf("after replace: name %q, skills %+v", got.Name, got.Skills)
	}
	if _, err := e.s.GetFile(e.ctx, alice, c.ID, fl.ID); err != nil {
		t.Errorf("replacing a container lost its file: %v", err)
	}
	if err := e.s.DeleteContainer(e.ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.GetContainer(e.ctx, alice, c.ID)
	wantErr(t, "GetContainer after delete", err, store.ErrNotFound)
	wantErr(t, "DeleteContainer twice", e.s.DeleteContainer(e.ctx, alice, c.ID), store.ErrNotFound)
	_, err = e.s.GetFile(e.ctx, alice, c.ID, fl.ID)
	wantErr(t, "GetFile of a deleted container", err, store.ErrNotFound)
	if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 0 {
		t.Errorf("ListContainers after delete: %+v", page)
	}
	_, err = e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: idgen.New("cntr_"), Path: "/mnt/data/x"}, nil)
	wantErr(t, "PutFile into an unknown container", err, store.ErrNotFound)
}

func testOwnerIsolation(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "mine")
	cf := e.file(alice, c.ID, "/mnt/data/secret.csv", []byte("a,b\n"))
	af := e.apiFile(alice, "secret.txt", []byte("secret"))
	now := e.clock.Now()

	type check struct {
		what string
		err  error
	}
	var checks []check
	add := func(what string, err error) { checks = append(checks, check{what, err}) }
	_, err := e.s.GetContainer(e.ctx, bob, c.ID)
	add("GetContainer", err)
	_, err = e.s.TouchContainer(e.ctx, bob, c.ID, now)
	add("TouchContainer", err)
	_, _, err = e.s.ListFiles(e.ctx, bob, c.ID, store.ListOptions{})
	add("ListFiles", err)
	_, err = e.s.GetFile(e.ctx, bob, c.ID, cf.ID)
	add("GetFile", err)
	_, err = e.s.FileContent(e.ctx, bob, c.ID, cf.ID)
	add("FileContent", err)
	_, err = e.s.GetFile(e.ctx, bob, "", af.ID)
	add("GetFile (Files API)", err)
	_, err = e.s.FileContent(e.ctx, bob, "", af.ID)
	add("FileContent (Files API)", err)
	_, err = e.s.PutFile(e.ctx, store.File{Owner: bob, ContainerID: c.ID, Path: "/mnt/data/x"}, []byte("x"))
	add("PutFile into another's container", err)
	add("DeleteFile", e.s.DeleteFile(e.ctx, bob, c.ID, cf.ID))
	add("DeleteFile (Files API)", e.s.DeleteFile(e.ctx, bob, "", af.ID))
	add("DeleteContainer", e.s.DeleteContainer(e.ctx, bob, c.ID))
	for _, ch := range checks {
		wantErr(t, "bob's "+ch.what, ch.err, store.ErrNotFound)
	}
	if page, more := e.listContainers(bob, store.ListOptions{}); len(page) != 0 || more {
		t.Errorf("bob lists alice's containers: %+v", page)
	}
	if page, _ := e.listFiles(bob, "", store.ListOptions{}); len(page) != 0 {
		t.Errorf("bob lists alice's files: %+v", page)
	}
	// After-cursors are per owner too.
	if page, _ := e.listContainers(bob, store.ListOptions{After: c.ID}); len(page) != 0 {
		t.Errorf("bob pages from alice's container: %+v", page)
	}
	// Alice still has everything.
	if _, err := e.s.GetContainer(e.ctx, alice, c.ID); err != nil {
		t.Errorf("alice's container after bob's attempts: %v", err)
	}
	if data, err := e.s.FileContent(e.ctx, alice, c.ID, cf.ID); err != nil || string(data) != "a,b\n" {
		t.Errorf("alice's file after bob's attempts: %q, %v", data, err)
	}
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 {
		t.Errorf("alice's container files after bob's attempts: %+v", page)
	}
	if _, err := e.s.GetFile(e.ctx, alice, "", af.ID); err != nil {
		t.Errorf("alice's Files API file after bob's attempts: %v", err)
	}
}

// sameSecond makes n containers, two per creation second, so ties on
// created_at are ordered by id.
func (e *env) sameSecond(owner string, n int) []store.Container {
	var cs []store.Container
	for i := range n {
		if i > 0 && i%2 == 0 {
			e.clock.Advance(time.Second)
		}
		cs = append(cs, e.container(owner, fmt.Sprintf("c%d", i)))
	}
	return cs
}

// sortedIDs is cs's ids in the order listings use: (created_at, id).
func sortedIDs(cs []store.Container, desc bool) []string {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b store.Container) int {
		r := cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
		if desc {
			return -r
		}
		return r
	})
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func testContainerPagination(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	cs := e.sameSecond(alice, 7)
	e.container(bob, "bob's") // never in alice's pages
	for _, tc := range []struct {
		order string
		limit int
	}{
		{"asc", 1}, {"asc", 2}, {"asc", 3}, {"asc", 7}, {"asc", 10},
		{"desc", 1}, {"desc", 3}, {"desc", 7}, {"", 2}, {"", 10},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.order, tc.limit), func(t *testing.T) {
			want := sortedIDs(cs, tc.order != "asc")
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(cs)+1 {
					t.Fatal("pagination does not end")
				}
				page, more := e.listContainers(alice, store.ListOptions{Limit: tc.limit, Order: tc.order, After: after})
				if len(page) > tc.limit {
					t.Fatalf("page of %d, limit %d", len(page), tc.limit)
				}
				for _, c := range page {
					got = append(got, c.ID)
				}
				if !more {
					break
				}
				if len(page) != tc.limit {
					t.Fatalf("short page (%d of %d) with has_more", len(page), tc.limit)
				}
				after = page[len(page)-1].ID
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("pages gave\n%v\nwant\n%v", got, want)
			}
		})
	}
	t.Run("unknown after", func(t *testing.T) {
		page, more := e.listContainers(alice, store.ListOptions{After: idgen.New("cntr_")})
		if len(page) != 0 || more {
			t.Errorf("unknown after gave %d items, more=%v; want an empty page", len(page), more)
		}
	})
	t.Run("after the last", func(t *testing.T) {
		want := sortedIDs(cs, false)
		page, more := e.listContainers(alice, store.ListOptions{Order: "asc", After: want[len(want)-1]})
		if len(page) != 0 || more {
			t.Errorf("after the last gave %d items, more=%v", len(page), more)
		}
	})
	t.Run("bad order", func(t *testing.T) {
		if _, _, err := e.s.ListContainers(e.ctx, alice, store.ListOptions{Order: "sideways"}); err == nil {
			t.Error("order sideways accepted")
		}
	})
}

func testListLimits(t *testing.T, f Factory) {
	e := newEnv(t, f, store.Limits{})
	for range 105 {
		e.container(alice, "x")
	}
	for _, tc := range []struct {
		limit, want int
		more        bool
	}{
		{0, store.DefaultListLimit, true},
		{-5, 1, true},
		{1, 1, true},
		{100, 100, true},
		{1000, 100, true},
		{105, 100, true},
	} {
		page, more := e.listContainers(alice, store.ListOptions{Limit: tc.limit})
		if len(page) != tc.want || more != tc.more {
			t.Errorf("limit %d: %d items, more=%v; want %d, %v", tc.limit, len(page), more, tc.want, tc.more)
		}
	}
	// The last page of a clamped listing.
	page, _ := e.listContainers(alice, store.ListOptions{Limit: 100, Order: "asc"})
	rest, more := e.listContainers(alice, store.ListOptions{Limit: 100, Order: "asc", After: page[99].ID})
	if len(rest) != 5 || more {
		t.Errorf("second page: %d items, more=%v; want 5, false", len(rest), more)
	}
}

func testNameFilter(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	var named []store.Container
	for i := range 5 {
		name := "other"
		if i%2 == 0 {
			name = "wanted"
		}
		c := e.container(alice, name)
		if name == "wanted" {
			named = append(named, c)
		}
		e.clock.Advance(time.Second)
	}
	page, more := e.listContainers(alice, store.ListOptions{Name: "wanted", Order: "asc", Limit: 2})
	if len(page) != 2 || !more || page[0].ID != named[0].ID || page[1].ID != named[1].ID {
		t.Fatalf("first named page: %+v, more=%v", page, more)
	}
	page, more = e.listContainers(alice, store.ListOptions{Name: "wanted", Order: "asc", Limit: 2, After: page[1].ID})
	if len(page) != 1 || more || page[0].ID != named[2].ID {
		t.Fatalf("second named page: %+v, more=%v", page, more)
	}
	if page, _ := e.listContainers(alice, store.ListOptions{Name: "nothing"}); len(page) != 0 {
		t.Errorf("name nothing: %+v", page)
	}
}

func testFilePagination(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "c")
	var cids, aids []string
	for i := range 5 {
		if i%2 == 0 {
			e.clock.Advance(time.Second)
		}
		cids = append(cids, e.file(alice, c.ID, fmt.Sprintf("/mnt/data/%d.txt", i), []byte{byte(i)}).ID)
		aids = append(aids, e.apiFile(alice, fmt.Sprintf("%d.txt", i), []byte{byte(i)}).ID)
	}
	for _, tc := range []struct {
		name, cid string
		ids       []string
	}{{"container", c.ID, cids}, {"files API", "", aids}} {
		for _, order := range []string{"asc", "desc"} {
			t.Run(tc.name+"/"+order, func(t *testing.T) {
				var got []string
				after := ""
				for {
					page, more := e.listFiles(alice, tc.cid, store.ListOptions{Limit: 2, Order: order, After: after})
					for _, f := range page {
						got = append(got, f.ID)
					}
					if !more {
						break
					}
					after = page[len(page)-1].ID
				}
				// Same-second files are ordered by id: compare as a
				// multiset in order of created_at groups.
				if len(got) != len(tc.ids) {
					t.Fatalf("got %d files, want %d", len(got), len(tc.ids))
				}
				all, _ := e.listFiles(alice, tc.cid, store.ListOptions{Limit: 100, Order: order})
				for i := range all {
					if all[i].ID != got[i] {
						t.Fatalf("paged order %v differs from one page %v", got, ids(all))
					}
					if i > 0 {
						a, b := all[i-1], all[i]
						less := a.CreatedAt < b.CreatedAt || a.CreatedAt == b.CreatedAt && a.ID < b.ID
						if less != (order == "asc") {
							t.Fatalf("order %s broken at %d: %+v then %+v", order, i, a, b)
						}
					}
				}
			})
		}
	}
	// An after id from the other listing is unknown here.
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{After: aids[0]}); len(page) != 0 {
		t.Errorf("a Files API id as a container listing's after: %+v", page)
	}
}

func ids(fs []store.File) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

func testTouch(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "t")
	fl := e.file(alice, c.ID, "/mnt/data/f", []byte("kept"))
	for step := range 3 {
		e.clock.Advance(15 * time.Minute) // under the 20 minutes each time
		now := e.clock.Now()
		got, err := e.s.TouchContainer(e.ctx, alice, c.ID, now)
		if err != nil {
			t.Fatalf("touch %d: %v", step, err)
		}
		if got.LastActiveAt != now.Unix() {
			t.Fatalf("touch %d: last_active_at %d, want %d", step, got.LastActiveAt, now.Unix())
		}
		if stored, _ := e.s.GetContainer(e.ctx, alice, c.ID); stored.LastActiveAt != now.Unix() {
			t.Fatalf("touch %d not stored: %+v", step, stored)
		}
	}
	// 45 minutes after creation, the container and its file live on.
	if data, err := e.s.FileContent(e.ctx, alice, c.ID, fl.ID); err != nil || string(data) != "kept" {
		t.Fatalf("file after touches: %q, %v", data, err)
	}
	e.clock.Advance(20 * time.Minute)
	_, err := e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantErr(t, "touch 20 minutes after the last use", err, store.ErrExpired)
}

func testExpiry(t *testing.T, f Factory) {
	l := store.DefaultLimits()
	l.OwnerContainers = 1
	l.OwnerBytes = 10
	l.ExpiredMemory = time.Hour
	e := newEnv(t, f, l)
	c := e.container(alice, "short")
	fl := e.file(alice, c.ID, "/mnt/data/big", bytes.Repeat([]byte("x"), 10))
	e.clock.Advance(20 * time.Minute) // exactly at the expiry: expired

	got, err := e.s.GetContainer(e.ctx, alice, c.ID)
	if err != nil {
		t.Fatalf("GetContainer of an expired container: %v (it must be remembered)", err)
	}
	if !got.Expired(e.clock.Now()) {
		t.Errorf("container not expired at %v: %+v", e.clock.Now(), got)
	}
	_, err = e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantErr(t, "TouchContainer", err, store.ErrExpired)
	_, err = e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: "/mnt/data/new"}, []byte("n"))
	wantErr(t, "PutFile", err, store.ErrExpired)
	_, err = e.s.GetFile(e.ctx, alice, c.ID, fl.ID)
	wantErr(t, "GetFile", err, store.ErrExpired)
	_, err = e.s.FileContent(e.ctx, alice, c.ID, fl.ID)
	wantErr(t, "FileContent", err, store.ErrExpired)
	_, _, err = e.s.ListFiles(e.ctx, alice, c.ID, store.ListOptions{})
	wantErr(t, "ListFiles", err, store.ErrExpired)
	if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 0 {
		t.Errorf("ListContainers shows an expired container: %+v", page)
	}

	// It no longer counts: a new container and a file of all the owner's
	// bytes fit.
	c2 := e.container(alice, "next")
	e.file(alice, c2.ID, "/mnt/data/big", bytes.Repeat([]byte("y"), 10))
	if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 1 || page[0].ID != c2.ID {
		t.Errorf("ListContainers: %+v, want only %s", page, c2.ID)
	}

	// Its files stay gone even if it were revived by a replacement.
	_, err = e.s.GetFile(e.ctx, alice, c.ID, fl.ID)
	wantErr(t, "GetFile again", err, store.ErrExpired)

	// Past ExpiredMemory it is forgotten.
	e.clock.Advance(l.ExpiredMemory)
	_, err = e.s.GetContainer(e.ctx, alice, c.ID)
	wantErr(t, "GetContainer after ExpiredMemory", err, store.ErrNotFound)
	_, err = e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantErr(t, "TouchContainer after ExpiredMemory", err, store.ErrNotFound)

	// An expired, remembered container can be deleted.
	e2 := newEnv(t, f, l)
	c3 := e2.container(alice, "del")
	e2.clock.Advance(21 * time.Minute)
	if err := e2.s.DeleteContainer(e2.ctx, alice, c3.ID); err != nil {
		t.Errorf("DeleteContainer of an expired container: %v", err)
	}
	_, err = e2.s.GetContainer(e2.ctx, alice, c3.ID)
	wantErr(t, "GetContainer after deleting an expired one", err, store.ErrNotFound)
}

func testFiles(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "files")
	data := binary()
	in := store.File{ID: idgen.New("cfile_"), Owner: alice, ContainerID: c.ID, Path: "/mnt/data/bin.dat", Source: "user"}
	put, err := e.s.PutFile(e.ctx, in, data)
	if err != nil {
		t.Fatal(err)
	}
	if put.ID != in.ID || put.Bytes != int64(len(data)) || put.Filename != "bin.dat" || put.CreatedAt != e.clock.Now().Unix() {
		t.Errorf("PutFile = %+v", put)
	}
	data[0] = 'X' // the store must have copied the bytes
	got, err := e.s.GetFile(e.ctx, alice, c.ID, put.ID)
	if err != nil || got != put {
		t.Fatalf("GetFile = %+v, %v; want %+v", got, err, put)
	}
	content, err := e.s.FileContent(e.ctx, alice, c.ID, put.ID)
	if err != nil || !bytes.Equal(content, binary()) {
		t.Fatalf("FileContent = %d bytes (%v), want the 512 binary bytes exactly", len(content), err)
	}
	content[1] = 'Y'
	if again, _ := e.s.FileContent(e.ctx, alice, c.ID, put.ID); !bytes.Equal(again, binary()) {
		t.Error("changing FileContent's slice changed the stored file")
	}

	// Replacing the path keeps the id and the creation time.
	e.clock.Advance(time.Second)
	rep, err := e.s.PutFile(e.ctx, store.File{ID: idgen.New("cfile_"), Owner: alice, ContainerID: c.ID, Path: "/mnt/data/bin.dat", Source: "assistant"}, []byte("short\x00"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.ID != put.ID || rep.Bytes != 6 || rep.CreatedAt != put.CreatedAt || rep.Source != "assistant" {
		t.Errorf("replacement = %+v; want id %s, 6 bytes, created_at %d", rep, put.ID, put.CreatedAt)
	}
	if got, _ := e.s.GetFile(e.ctx, alice, c.ID, put.ID); got.Bytes != 6 {
		t.Errorf("GetFile after replace: %+v", got)
	}
	if content, _ := e.s.FileContent(e.ctx, alice, c.ID, put.ID); string(content) != "short\x00" {
		t.Errorf("content after replace: %q", content)
	}
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 {
		t.Errorf("after replace, %d files; want 1", len(page))
	}

	// A filename without a path lands in /mnt/data; an empty file is a file.
	empty, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Filename: "empty.txt"}, nil)
	if err != nil || empty.Path != "/mnt/data/empty.txt" || empty.Bytes != 0 {
		t.Fatalf("PutFile by filename = %+v, %v", empty, err)
	}
	if content, err := e.s.FileContent(e.ctx, alice, c.ID, empty.ID); err != nil || len(content) != 0 {
		t.Errorf("empty file content %q, %v", content, err)
	}
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 2 {
		t.Errorf("%d files; want 2", len(page))
	}

	if err := e.s.DeleteFile(e.ctx, alice, c.ID, put.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.GetFile(e.ctx, alice, c.ID, put.ID)
	wantErr(t, "GetFile after delete", err, store.ErrNotFound)
	_, err = e.s.FileContent(e.ctx, alice, c.ID, put.ID)
	wantErr(t, "FileContent after delete", err, store.ErrNotFound)
	wantErr(t, "DeleteFile twice", e.s.DeleteFile(e.ctx, alice, c.ID, put.ID), store.ErrNotFound)
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 || page[0].ID != empty.ID {
		t.Errorf("after delete: %+v", page)
	}
	// The path is free again: a new file there gets a new id.
	again := e.file(alice, c.ID, "/mnt/data/bin.dat", []byte("new"))
	if again.ID == put.ID {
		t.Error("a deleted file's id came back")
	}

	// Files API: the same for a file without a container.
	af, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "data.bin", Purpose: "user_data"}, binary())
	if err != nil {
		t.Fatal(err)
	}
	if af.Path != "" || af.ContainerID != "" || af.Bytes != 512 || af.Purpose != "user_data" || !store.ValidID(af.ID) {
		t.Errorf("Files API PutFile = %+v", af)
	}
	if content, err := e.s.FileContent(e.ctx, alice, "", af.ID); err != nil || !bytes.Equal(content, binary()) {
		t.Errorf("Files API content: %d bytes, %v", len(content), err)
	}
	if err := e.s.DeleteFile(e.ctx, alice, "", af.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.GetFile(e.ctx, alice, "", af.ID)
	wantErr(t, "Files API GetFile after delete", err, store.ErrNotFound)
}

func testFilesAPISeparate(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "sep")
	cf := e.file(alice, c.ID, "/mnt/data/in-container", []byte("c"))
	af := e.apiFile(alice, "uploaded", []byte("a"))
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 || page[0].ID != cf.ID {
		t.Errorf("container files: %+v", page)
	}
	if page, _ := e.listFiles(alice, "", store.ListOptions{}); len(page) != 1 || page[0].ID != af.ID {
		t.Errorf("Files API files: %+v", page)
	}
	_, err := e.s.GetFile(e.ctx, alice, c.ID, af.ID)
	wantErr(t, "a Files API file through a container", err, store.ErrNotFound)
	_, err = e.s.GetFile(e.ctx, alice, "", cf.ID)
	wantErr(t, "a container file through the Files API", err, store.ErrNotFound)
	_, err = e.s.FileContent(e.ctx, alice, "", cf.ID)
	wantErr(t, "a container file's content through the Files API", err, store.ErrNotFound)
	wantErr(t, "deleting a container file through the Files API", e.s.DeleteFile(e.ctx, alice, "", cf.ID), store.ErrNotFound)
	other := e.container(alice, "other")
	_, err = e.s.GetFile(e.ctx, alice, other.ID, cf.ID)
	wantErr(t, "a container file through another container", err, store.ErrNotFound)
	wantErr(t, "deleting a container file through another container", e.s.DeleteFile(e.ctx, alice, other.ID, cf.ID), store.ErrNotFound)
	if err := e.s.DeleteContainer(e.ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.GetFile(e.ctx, alice, "", af.ID); err != nil {
		t.Errorf("deleting a container took a Files API file: %v", err)
	}
}

func testFileLifetime(t *testing.T, f Factory) {
	l := store.DefaultLimits()
	l.FileLifetime = time.Hour
	l.OwnerFiles = 1
	e := newEnv(t, f, l)
	af := e.apiFile(alice, "a", []byte("a"))
	if want := e.clock.Now().Add(time.Hour).Unix(); af.ExpiresAt != want {
		t.Errorf("ExpiresAt %d, want now+FileLifetime %d", af.ExpiresAt, want)
	}
	e.clock.Advance(59 * time.Minute)
	if _, err := e.s.GetFile(e.ctx, alice, "", af.ID); err != nil {
		t.Fatalf("file before its lifetime: %v", err)
	}
	_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "b"}, []byte("b"))
	wantQuota(t, "a second file while the first lives", err, store.LimitOwnerFiles)
	e.clock.Advance(time.Minute)
	_, err = e.s.GetFile(e.ctx, alice, "", af.ID)
	wantErr(t, "GetFile after the lifetime", err, store.ErrNotFound)
	_, err = e.s.FileContent(e.ctx, alice, "", af.ID)
	wantErr(t, "FileContent after the lifetime", err, store.ErrNotFound)
	if page, _ := e.listFiles(alice, "", store.ListOptions{}); len(page) != 0 {
		t.Errorf("an expired file is listed: %+v", page)
	}
	// Its slot is free; an explicit ExpiresAt is kept.
	at := e.clock.Now().Add(10 * time.Minute).Unix()
	b, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "b", ExpiresAt: at}, []byte("b"))
	if err != nil || b.ExpiresAt != at {
		t.Fatalf("PutFile with ExpiresAt = %+v, %v", b, err)
	}
	e.clock.Advance(10 * time.Minute)
	_, err = e.s.GetFile(e.ctx, alice, "", b.ID)
	wantErr(t, "GetFile after an explicit ExpiresAt", err, store.ErrNotFound)

	// Container files do not take a lifetime of their own.
	c := e.container(alice, "c")
	cf := e.file(alice, c.ID, "/mnt/data/x", []byte("x"))
	if cf.ExpiresAt != 0 {
		t.Errorf("container file ExpiresAt %d", cf.ExpiresAt)
	}
	e.clock.Advance(19 * time.Minute)
	if _, err := e.s.GetFile(e.ctx, alice, c.ID, cf.ID); err != nil {
		t.Errorf("container file within its container's life: %v", err)
	}
}

func testDeleteContainerFrees(t *testing.T, f Factory) {
	l := store.DefaultLimits()
	l.OwnerBytes = 10
	l.OwnerContainers = 1
	e := newEnv(t, f, l)
	c := e.container(alice, "c")
	e.file(alice, c.ID, "/mnt/data/x", bytes.Repeat([]byte("x"), 10))
	if err := e.s.DeleteContainer(e.ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	c2 := e.container(alice, "c2") // the container slot is free
	e.file(alice, c2.ID, "/mnt/data/x", bytes.Repeat([]byte("y"), 10))
}

func testQuotas(t *testing.T, f Factory) {
	ten := bytes.Repeat([]byte("q"), 10)
	tests := []struct {
		name  string
		l     store.Limits
		limit string
		// fill prepares; over must fail with limit; check verifies
		// nothing of over was written.
		run func(t *testing.T, e *env) (check func(), over error)
	}{
		{"file bytes", store.Limits{FileBytes: 10}, store.LimitFileBytes, func(t *testing.T, e *env) (func(), error) {
			c := e.container(alice, "c")
			e.file(alice, c.ID, "/mnt/data/ok", ten)
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: "/mnt/data/big"}, append(ten, 'x'))
			return func() {
				if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 {
					t.Errorf("%d files after the refused one", len(page))
				}
			}, err
		}},
		{"file bytes, Files API", store.Limits{FileBytes: 10}, store.LimitFileBytes, func(t *testing.T, e *env) (func(), error) {
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "big"}, append(ten, 'x'))
			return func() {
				if page, _ := e.listFiles(alice, "", store.ListOptions{}); len(page) != 0 {
					t.Errorf("%d files after the refused one", len(page))
				}
			}, err
		}},
		{"container bytes", store.Limits{ContainerBytes: 10}, store.LimitContainerBytes, func(t *testing.T, e *env) (func(), error) {
			c := e.container(alice, "c")
			a := e.file(alice, c.ID, "/mnt/data/a", []byte("123456"))
			// A replacement counts its growth only: 6 → 10 fits.
			e.file(alice, c.ID, "/mnt/data/a", ten)
			e.file(alice, c.ID, "/mnt/data/a", []byte("123456"))
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: "/mnt/data/b"}, []byte("12345"))
			return func() {
				if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 1 {
					t.Errorf("%d files after the refused one", len(page))
				}
				if data, _ := e.s.FileContent(e.ctx, alice, c.ID, a.ID); string(data) != "123456" {
					t.Errorf("content %q", data)
				}
				// Another container has its own budget.
				c2 := e.container(alice, "c2")
				e.file(alice, c2.ID, "/mnt/data/b", ten)
			}, err
		}},
		{"container bytes, replacing", store.Limits{ContainerBytes: 10}, store.LimitContainerBytes, func(t *testing.T, e *env) (func(), error) {
			c := e.container(alice, "c")
			a := e.file(alice, c.ID, "/mnt/data/a", []byte("12345"))
			e.file(alice, c.ID, "/mnt/data/b", []byte("12345"))
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: "/mnt/data/a"}, []byte("123456"))
			return func() {
				if data, _ := e.s.FileContent(e.ctx, alice, c.ID, a.ID); string(data) != "12345" {
					t.Errorf("a refused replacement changed the file: %q", data)
				}
			}, err
		}},
		{"container files", store.Limits{ContainerFiles: 2}, store.LimitContainerFiles, func(t *testing.T, e *env) (func(), error) {
			c := e.container(alice, "c")
			e.file(alice, c.ID, "/mnt/data/a", []byte("a"))
			e.file(alice, c.ID, "/mnt/data/b", []byte("b"))
			e.file(alice, c.ID, "/mnt/data/b", []byte("b2")) // replacing is not a new file
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: "/mnt/data/c"}, []byte("c"))
			return func() {
				if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 2 {
					t.Errorf("%d files after the refused one", len(page))
				}
			}, err
		}},
		{"owner bytes", store.Limits{OwnerBytes: 10}, store.LimitOwnerBytes, func(t *testing.T, e *env) (func(), error) {
			c := e.container(alice, "c")
			e.file(alice, c.ID, "/mnt/data/a", []byte("123456"))
			e.file(bob, e.container(bob, "b").ID, "/mnt/data/a", ten) // bob has his own
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "b"}, []byte("12345"))
			return func() {
				if page, _ := e.listFiles(alice, "", store.ListOptions{}); len(page) != 0 {
					t.Errorf("%d Files API files after the refused one", len(page))
				}
				e.apiFile(alice, "fits", []byte("1234"))
			}, err
		}},
		{"owner containers", store.Limits{OwnerContainers: 2}, store.LimitOwnerContainers, func(t *testing.T, e *env) (func(), error) {
			a := e.container(alice, "a")
			e.container(alice, "b")
			a.Name = "a2"
			if err := e.s.PutContainer(e.ctx, a); err != nil { // replacing is not a new one
				t.Fatalf("replacing at the bound: %v", err)
			}
			e.container(bob, "bob's") // bob has his own
			now := e.clock.Now().Unix()
			over := store.Container{ID: idgen.New("cntr_"), Owner: alice, Name: "c", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20}
			err := e.s.PutContainer(e.ctx, over)
			return func() {
				_, err := e.s.GetContainer(e.ctx, alice, over.ID)
				wantErr(t, "the refused container", err, store.ErrNotFound)
				if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 2 {
					t.Errorf("%d containers", len(page))
				}
				if err := e.s.DeleteContainer(e.ctx, alice, a.ID); err != nil {
					t.Fatal(err)
				}
				if err := e.s.PutContainer(e.ctx, over); err != nil {
					t.Errorf("after a delete: %v", err)
				}
			}, err
		}},
		{"owner files", store.Limits{OwnerFiles: 2}, store.LimitOwnerFiles, func(t *testing.T, e *env) (func(), error) {
			a := e.apiFile(alice, "a", []byte("a"))
			e.apiFile(alice, "b", []byte("b"))
			c := e.container(alice, "c")
			e.file(alice, c.ID, "/mnt/data/x", []byte("x")) // container files do not count
			e.file(alice, c.ID, "/mnt/data/y", []byte("y"))
			e.file(alice, c.ID, "/mnt/data/z", []byte("z"))
			_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "c"}, []byte("c"))
			return func() {
				if page, _ := e.listFiles(alice, "", store.ListOptions{}); len(page) != 2 {
					t.Errorf("%d Files API files", len(page))
				}
				if err := e.s.DeleteFile(e.ctx, alice, "", a.ID); err != nil {
					t.Fatal(err)
				}
				e.apiFile(alice, "c", []byte("c"))
			}, err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, f, tc.l)
			check, err := tc.run(t, e)
			wantQuota(t, tc.name, err, tc.limit)
			var q *store.QuotaError
			if errors.As(err, &q) && q.Max <= 0 {
				t.Errorf("QuotaError.Max %d", q.Max)
			}
			check()
		})
	}
}

func testConcurrentContainers(t *testing.T, f Factory) {
	const bound, racers = 5, 40
	e := newEnv(t, f, store.Limits{OwnerContainers: bound})
	var ok, refused atomic.Int32
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			now := e.clock.Now().Unix()
			err := e.s.PutContainer(e.ctx, store.Container{ID: idgen.New("cntr_"), Owner: alice, CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20})
			var q *store.QuotaError
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &q):
				refused.Add(1)
			default:
				t.Errorf("PutContainer: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != bound || refused.Load() != racers-bound {
		t.Errorf("%d created, %d refused; want %d, %d", ok.Load(), refused.Load(), bound, racers-bound)
	}
	if page, _ := e.listContainers(alice, store.ListOptions{Limit: 100}); len(page) != bound {
		t.Errorf("%d containers listed, want %d", len(page), bound)
	}
}

func testConcurrentBytes(t *testing.T, f Factory) {
	const bound, racers = 10, 30
	e := newEnv(t, f, store.Limits{OwnerBytes: bound})
	c := e.container(alice, "c")
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				_, err = e.s.PutFile(e.ctx, store.File{Owner: alice, Filename: "f"}, []byte("1"))
			} else {
				_, err = e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: fmt.Sprintf("/mnt/data/%d", i)}, []byte("1"))
			}
			var q *store.QuotaError
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.As(err, &q):
				t.Errorf("PutFile: %v", err)
			}
		})
	}
	wg.Wait()
	cf, _ := e.listFiles(alice, c.ID, store.ListOptions{Limit: 100})
	af, _ := e.listFiles(alice, "", store.ListOptions{Limit: 100})
	if ok.Load() != bound || len(cf)+len(af) != bound {
		t.Errorf("%d stored (%d listed), want %d", ok.Load(), len(cf)+len(af), bound)
	}
}

func testInvalidInput(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	now := e.clock.Now().Unix()
	for _, c := range []store.Container{
		{ID: "", Owner: alice, ExpiresAfterMinutes: 20},
		{ID: "cntr_x", Owner: "", ExpiresAfterMinutes: 20},
		{ID: "cntr_{x}:y", Owner: alice, ExpiresAfterMinutes: 20},
		{ID: "cntr_x", Owner: alice, ExpiresAfterMinutes: -1},
	} {
		c.CreatedAt, c.LastActiveAt = now, now
		if err := e.s.PutContainer(e.ctx, c); err == nil {
			t.Errorf("PutContainer(%+v) accepted", c)
		}
	}
	c := e.container(alice, "c")
	for _, id := range []string{"", "a b", "../x", "x:y", "{x}"} {
		_, err := e.s.GetContainer(e.ctx, alice, id)
		wantErr(t, fmt.Sprintf("GetContainer(%q)", id), err, store.ErrNotFound)
		_, err = e.s.GetFile(e.ctx, alice, c.ID, id)
		wantErr(t, fmt.Sprintf("GetFile(%q)", id), err, store.ErrNotFound)
	}
	if _, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID}, []byte("x")); err == nil {
		t.Error("a container file without path or filename accepted")
	}
	if _, err := e.s.PutFile(e.ctx, store.File{ContainerID: c.ID, Path: "/mnt/data/x"}, []byte("x")); err == nil {
		t.Error("a file without an owner accepted")
	}
}

// testPathsFormATree: a container's files are a file system's files. The
// sequence that bricked a container — /mnt/data/x stored, then
// /mnt/data/x/y stored beside it — cannot happen: a file at a parent's
// place, or one below the new path, is a PathConflictError and nothing is
// written; once the file in the way is gone, the path is free.
func testPathsFormATree(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "tree")
	x := e.file(alice, c.ID, "/mnt/data/x", []byte("file"))
	deep := e.file(alice, c.ID, "/mnt/data/d/e/f.txt", []byte("deep"))
	for _, tc := range []struct{ path, other string }{
		{"/mnt/data/x/y", "/mnt/data/x"},       // below a file
		{"/mnt/data/x/y/z", "/mnt/data/x"},     // further below it
		{"/mnt/data/d", "/mnt/data/d/e/f.txt"}, // a directory of another file
		{"/mnt/data/d/e", "/mnt/data/d/e/f.txt"},
		{"/mnt/data/d/e/f.txt/g", "/mnt/data/d/e/f.txt"},
	} {
		_, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: tc.path, Source: "assistant"}, []byte("in the way"))
		var pc *store.PathConflictError
		if !errors.As(err, &pc) || pc.Path != tc.path || pc.Other != tc.other {
			t.Errorf("PutFile(%s) = %v; want a PathConflictError with %s", tc.path, err, tc.other)
		}
	}
	if page, _ := e.listFiles(alice, c.ID, store.ListOptions{}); len(page) != 2 {
		t.Fatalf("after the refused puts %d files, want the 2 first ones: %+v", len(page), page)
	}
	// Siblings and names that only share a prefix are no conflict; a
	// replacement of the file itself is none either.
	e.file(alice, c.ID, "/mnt/data/xy", []byte("sibling"))
	e.file(alice, c.ID, "/mnt/data/d/e2/f.txt", []byte("cousin"))
	if rep := e.file(alice, c.ID, "/mnt/data/x", []byte("new")); rep.ID != x.ID {
		t.Errorf("replacing /mnt/data/x gave id %s, want %s", rep.ID, x.ID)
	}
	// Deleted, the file is no longer in the way.
	if err := e.s.DeleteFile(e.ctx, alice, c.ID, x.ID); err != nil {
		t.Fatal(err)
	}
	e.file(alice, c.ID, "/mnt/data/x/y", []byte("now a directory"))
	if err := e.s.DeleteFile(e.ctx, alice, c.ID, deep.ID); err != nil {
		t.Fatal(err)
	}
	e.file(alice, c.ID, "/mnt/data/d/e", []byte("now a file"))
	// Paths that name no file in /mnt/data are refused outright.
	for _, p := range []string{"/tmp/x", "/mnt/data", "/mnt/data/", "/mnt/data/a//b", "/mnt/data/a/../b", "relative",
		"/mnt/data/" + strings.Repeat("n", store.MaxNameBytes+1)} {
		if _, err := e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: c.ID, Path: p}, []byte("x")); err == nil {
			t.Errorf("PutFile(%q) accepted", p)
		}
	}
	e.file(alice, c.ID, "/mnt/data/"+strings.Repeat("n", store.MaxNameBytes), []byte("the longest name"))
}

// testRevisions: every put makes a new revision, a replacement that keeps
// the id too, and reads return the stored one.
func testRevisions(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	c := e.container(alice, "rev")
	a := e.file(alice, c.ID, "/mnt/data/a.csv", []byte("1"))
	b := e.file(alice, c.ID, "/mnt/data/a.csv", []byte("1"))
	if a.Revision == "" || b.Revision == "" || a.Revision == b.Revision || a.ID != b.ID {
		t.Fatalf("revisions %q then %q of %s/%s: want two different non-empty revisions of one id", a.Revision, b.Revision, a.ID, b.ID)
	}
	got, err := e.s.GetFile(e.ctx, alice, c.ID, a.ID)
	if err != nil || got.Revision != b.Revision {
		t.Errorf("GetFile revision %q (%v), want the latest %q", got.Revision, err, b.Revision)
	}
	page, _ := e.listFiles(alice, c.ID, store.ListOptions{})
	if len(page) != 1 || page[0].Revision != b.Revision {
		t.Errorf("ListFiles = %+v; want revision %q", page, b.Revision)
	}
	api := e.apiFile(alice, "up.csv", []byte("1"))
	if api.Revision == "" {
		t.Error("a Files API file has no revision")
	}
}

// testOrigin: how a container was made is stored with it and read back
// by every call that returns it.
func testOrigin(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	now := e.clock.Now().Unix()
	want := map[string]string{} // id → origin
	for _, origin := range []string{store.OriginAPI, store.OriginAuto, ""} {
		c := store.Container{ID: idgen.New("cntr_"), Owner: alice, Name: "code-interpreter", Origin: origin,
			CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 20, MemoryLimit: "1g"}
		if err := e.s.PutContainer(e.ctx, c); err != nil {
			t.Fatal(err)
		}
		want[c.ID] = origin
		got, err := e.s.GetContainer(e.ctx, alice, c.ID)
		if err != nil || got.Origin != origin {
			t.Errorf("GetContainer origin %q (%v), want %q", got.Origin, err, origin)
		}
		touched, err := e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now())
		if err != nil || touched.Origin != origin {
			t.Errorf("TouchContainer origin %q (%v), want %q", touched.Origin, err, origin)
		}
		if got.Recyclable() != (origin == store.OriginAuto) {
			t.Errorf("origin %q: Recyclable() = %v", origin, got.Recyclable())
		}
	}
	page, _ := e.listContainers(alice, store.ListOptions{Limit: 10})
	if len(page) != len(want) {
		t.Fatalf("ListContainers: %d containers, want %d", len(page), len(want))
	}
	for _, c := range page {
		if o, ok := want[c.ID]; !ok || c.Origin != o {
			t.Errorf("ListContainers: %s has origin %q, want %q", c.ID, c.Origin, o)
		}
	}
}

// testRevive: with ExpiredKeep an expired container keeps its files (out
// of sight, counted against the owner's bytes, not its containers) until
// ReviveContainer makes it live again with them; past ExpiredKeep they are
// gone and it stays expired. Without ExpiredKeep nothing is kept.
func testRevive(t *testing.T, f Factory) {
	l := store.DefaultLimits()
	l.OwnerContainers = 1
	l.OwnerBytes = 15
	l.ExpiredMemory = 3 * time.Hour
	l.ExpiredKeep = 2 * time.Hour
	e := newEnv(t, f, l)
	c := e.container(alice, "kept")
	fl := e.file(alice, c.ID, "/mnt/data/data.csv", bytes.Repeat([]byte("x"), 10))
	e.clock.Advance(time.Hour)

	// Expired: as without ExpiredKeep, except that its bytes still count.
	_, err := e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantErr(t, "TouchContainer of an expired, kept container", err, store.ErrExpired)
	_, err = e.s.GetFile(e.ctx, alice, c.ID, fl.ID)
	wantErr(t, "GetFile of an expired, kept container", err, store.ErrExpired)
	if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 0 {
		t.Errorf("ListContainers shows an expired container: %+v", page)
	}
	other := e.container(alice, "other") // its container slot is free
	_, err = e.s.PutFile(e.ctx, store.File{Owner: alice, ContainerID: other.ID, Path: "/mnt/data/y"}, bytes.Repeat([]byte("y"), 10))
	wantQuota(t, "a file beside the kept bytes", err, store.LimitOwnerBytes)

	// Revived while the owner's containers are full: refused, nothing lost.
	_, err = e.s.ReviveContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantQuota(t, "ReviveContainer with the containers full", err, store.LimitOwnerContainers)
	if err := e.s.DeleteContainer(e.ctx, alice, other.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.ReviveContainer(e.ctx, alice, c.ID, e.clock.Now())
	if err != nil || got.Expired(e.clock.Now()) || got.LastActiveAt != e.clock.Now().Unix() {
		t.Fatalf("ReviveContainer: %+v, %v; want it live from now", got, err)
	}
	data, err := e.s.FileContent(e.ctx, alice, c.ID, fl.ID)
	if err != nil || !bytes.Equal(data, bytes.Repeat([]byte("x"), 10)) {
		t.Fatalf("the revived container's file: %q, %v", data, err)
	}
	if page, _ := e.listContainers(alice, store.ListOptions{}); len(page) != 1 || page[0].ID != c.ID {
		t.Errorf("ListContainers after the revival: %+v", page)
	}
	if _, err := e.s.TouchContainer(e.ctx, alice, c.ID, e.clock.Now()); err != nil {
		t.Errorf("TouchContainer of the revived container: %v", err)
	}
	// Reviving a live one is a touch.
	if _, err := e.s.ReviveContainer(e.ctx, alice, c.ID, e.clock.Now()); err != nil {
		t.Errorf("ReviveContainer of a live container: %v", err)
	}
	// Another owner cannot.
	_, err = e.s.ReviveContainer(e.ctx, bob, c.ID, e.clock.Now())
	wantErr(t, "ReviveContainer by another owner", err, store.ErrNotFound)

	// Past ExpiredKeep the files are gone: it stays expired, and its bytes
	// no longer count.
	e.clock.Advance(20*time.Minute + l.ExpiredKeep)
	_, err = e.s.ReviveContainer(e.ctx, alice, c.ID, e.clock.Now())
	wantErr(t, "ReviveContainer past ExpiredKeep", err, store.ErrExpired)
	c2 := e.container(alice, "after")
	e.file(alice, c2.ID, "/mnt/data/z", bytes.Repeat([]byte("z"), 15))

	// Without ExpiredKeep (OpenAI's behaviour) nothing is kept.
	l.ExpiredKeep = 0
	e2 := newEnv(t, f, l)
	c3 := e2.container(alice, "gone")
	e2.file(alice, c3.ID, "/mnt/data/a", []byte("a"))
	e2.clock.Advance(21 * time.Minute)
	_, err = e2.s.ReviveContainer(e2.ctx, alice, c3.ID, e2.clock.Now())
	wantErr(t, "ReviveContainer without ExpiredKeep", err, store.ErrExpired)
	_, err = e2.s.ReviveContainer(e2.ctx, alice, "cntr_unknown", e2.clock.Now())
	wantErr(t, "ReviveContainer of an unknown container", err, store.ErrNotFound)
}

// testOwnerBytes: what an owner holds is its containers' files and its
// Files API files, its own only; a deleted container's files go.
func testOwnerBytes(t *testing.T, f Factory) {
	e := newEnv(t, f, store.DefaultLimits())
	ob, ok := e.s.(store.OwnerBytes)
	if !ok {
		t.Fatalf("%T does not tell an owner's bytes (store.OwnerBytes)", e.s)
	}
	want := func(owner string, n int64) {
		t.Helper()
		got, err := ob.OwnerBytes(e.ctx, owner)
		if err != nil || got != n {
			t.Fatalf("OwnerBytes(%s) = %d, %v; want %d", owner, got, err, n)
		}
	}
	want(alice, 0)
	c := e.container(alice, "c")
	e.file(alice, c.ID, "/mnt/data/a.txt", make([]byte, 100))
	want(alice, 100)
	e.apiFile(alice, "b.txt", make([]byte, 50))
	want(alice, 150)
	want(bob, 0)
	if err := e.s.DeleteContainer(e.ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	want(alice, 50)
}
