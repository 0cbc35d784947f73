package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// SkillsFactory makes an empty store.Skills bounded by l whose clock is
// now; the factory's cleanup releases it.
type SkillsFactory func(t *testing.T, l store.SkillLimits, now func() time.Time) store.Skills

// RunSkills runs the store.Skills conformance suite against stores
// newStore makes.
func RunSkills(t *testing.T, newStore SkillsFactory) {
	tests := []struct {
		name string
		run  func(t *testing.T, f SkillsFactory)
	}{
		{"RoundTrip", testSkillRoundTrip},
		{"OwnerScoping", testSkillOwners},
		{"Versions", testSkillVersions},
		{"List", testSkillList},
		{"Quotas", testSkillQuotas},
		{"ConcurrentVersions", testSkillConcurrentVersions},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

func clockAt(sec int64) func() time.Time { return func() time.Time { return time.Unix(sec, 0) } }

func newSkill(t *testing.T, s store.Skills, owner, name string, zip []byte) (store.Skill, store.SkillVersion) {
	t.Helper()
	sk, v, err := s.CreateSkill(context.Background(), store.Skill{ID: idgen.New("skill_"), Owner: owner},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: name, Description: "about " + name}, zip)
	if err != nil {
		t.Fatal(err)
	}
	return sk, v
}

func testSkillRoundTrip(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	s := f(t, store.DefaultSkillLimits(), clockAt(1000))
	sk, v := newSkill(t, s, "o_a", "csv", []byte("zip-1"))
	if sk.Name != "csv" || sk.Description != "about csv" || sk.DefaultVersion != 1 || sk.LatestVersion != 1 || sk.CreatedAt != 1000 {
		t.Fatalf("skill: %+v", sk)
	}
	if v.Version != 1 || v.SkillID != sk.ID || v.Bytes != 5 || v.CreatedAt != 1000 {
		t.Fatalf("version: %+v", v)
	}
	got, err := s.GetSkill(ctx, "o_a", sk.ID)
	if err != nil || got != sk {
		t.Fatalf("get: %+v %v", got, err)
	}
	gv, err := s.GetVersion(ctx, "o_a", sk.ID, 1)
	if err != nil || gv != v {
		t.Fatalf("get version: %+v %v", gv, err)
	}
	data, err := s.VersionContent(ctx, "o_a", sk.ID, 1)
	if err != nil || string(data) != "zip-1" {
		t.Fatalf("content: %q %v", data, err)
	}
	if _, _, err := s.CreateSkill(ctx, sk, v, nil); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	if err := s.DeleteSkill(ctx, "o_a", sk.ID); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		func() error { _, err := s.GetSkill(ctx, "o_a", sk.ID); return err }(),
		func() error { _, err := s.VersionContent(ctx, "o_a", sk.ID, 1); return err }(),
		s.DeleteSkill(ctx, "o_a", sk.ID),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	}
}

func testSkillOwners(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	s := f(t, store.DefaultSkillLimits(), nil)
	sk, _ := newSkill(t, s, "o_a", "mine", []byte("z"))
	for name, err := range map[string]error{
		"get":      func() error { _, err := s.GetSkill(ctx, "o_b", sk.ID); return err }(),
		"version":  func() error { _, err := s.GetVersion(ctx, "o_b", sk.ID, 1); return err }(),
		"content":  func() error { _, err := s.VersionContent(ctx, "o_b", sk.ID, 1); return err }(),
		"versions": func() error { _, _, err := s.ListVersions(ctx, "o_b", sk.ID, store.ListOptions{}); return err }(),
		"default":  func() error { _, err := s.SetDefaultVersion(ctx, "o_b", sk.ID, 1); return err }(),
		"add": func() error {
			_, _, err := s.AddVersion(ctx, "o_b", sk.ID, store.SkillVersion{ID: idgen.New("skillver_")}, []byte("x"), true)
			return err
		}(),
		"delete version": s.DeleteVersion(ctx, "o_b", sk.ID, 1),
		"delete":         s.DeleteSkill(ctx, "o_b", sk.ID),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s as another owner: %v", name, err)
		}
	}
	if page, _, _ := s.ListSkills(ctx, "o_b", store.ListOptions{}); len(page) != 0 {
		t.Fatalf("another owner lists %v", page)
	}
	if _, err := s.GetSkill(ctx, "o_a", sk.ID); err != nil {
		t.Fatalf("the owner's skill is gone: %v", err)
	}
}

func testSkillVersions(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	s := f(t, store.DefaultSkillLimits(), clockAt(50))
	sk, _ := newSkill(t, s, "o_a", "v1", []byte("one"))
	v2, got, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_"), Name: "v2", Description: "second"}, []byte("two"), false)
	if err != nil || v2.Version != 2 || got.LatestVersion != 2 || got.DefaultVersion != 1 || got.Name != "v1" {
		t.Fatalf("add: %+v %+v %v", v2, got, err)
	}
	v3, got, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_"), Name: "v3", Description: "third"}, []byte("three"), true)
	if err != nil || v3.Version != 3 || got.DefaultVersion != 3 || got.Name != "v3" || got.Description != "third" {
		t.Fatalf("add default: %+v %+v %v", v3, got, err)
	}
	if _, err := s.SetDefaultVersion(ctx, "o_a", sk.ID, 9); !errors.Is(err, store.ErrNoVersion) {
		t.Fatalf("default 9: %v", err)
	}
	if got, err = s.SetDefaultVersion(ctx, "o_a", sk.ID, 2); err != nil || got.DefaultVersion != 2 || got.Name != "v2" {
		t.Fatalf("default 2: %+v %v", got, err)
	}
	if err := s.DeleteVersion(ctx, "o_a", sk.ID, 2); !errors.Is(err, store.ErrDefaultVersion) {
		t.Fatalf("delete the default: %v", err)
	}
	if err := s.DeleteVersion(ctx, "o_a", sk.ID, 3); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.GetSkill(ctx, "o_a", sk.ID); got.LatestVersion != 2 {
		t.Fatalf("latest after deleting 3: %+v", got)
	}
	if _, err := s.VersionContent(ctx, "o_a", sk.ID, 3); !errors.Is(err, store.ErrNoVersion) {
		t.Fatalf("content of a deleted version: %v", err)
	}
	if data, _ := s.VersionContent(ctx, "o_a", sk.ID, 2); !bytes.Equal(data, []byte("two")) {
		t.Fatalf("content 2: %q", data)
	}
	// The next version is after the highest there is.
	v4, _, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_"), Name: "v4", Description: "d"}, []byte("4"), false)
	if err != nil || v4.Version != 3 {
		t.Fatalf("add after delete: %+v %v", v4, err)
	}
	page, more, err := s.ListVersions(ctx, "o_a", sk.ID, store.ListOptions{Order: "asc", Limit: 2})
	if err != nil || !more || len(page) != 2 || page[0].Version != 1 || page[1].Version != 2 {
		t.Fatalf("versions asc: %+v %v %v", page, more, err)
	}
	page, more, _ = s.ListVersions(ctx, "o_a", sk.ID, store.ListOptions{Limit: 1})
	if !more || page[0].Version != 3 {
		t.Fatalf("versions desc: %+v %v", page, more)
	}
	page, _, _ = s.ListVersions(ctx, "o_a", sk.ID, store.ListOptions{After: page[0].ID})
	if len(page) != 2 || page[0].Version != 2 {
		t.Fatalf("versions after: %+v", page)
	}
}

func testSkillList(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	now := int64(100)
	s := f(t, store.DefaultSkillLimits(), func() time.Time { return time.Unix(now, 0) })
	var ids []string
	for i := range 5 {
		now++
		sk, _ := newSkill(t, s, "o_a", fmt.Sprintf("s%d", i), []byte("z"))
		ids = append(ids, sk.ID)
	}
	// An inline skill belongs to a container: never listed.
	_, _, err := s.CreateSkill(ctx, store.Skill{ID: idgen.New("skill_"), Owner: "o_a", Container: "cntr_x"},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: "inline", Description: "d"}, []byte("z"))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	after := ""
	for {
		page, more, err := s.ListSkills(ctx, "o_a", store.ListOptions{Limit: 2, Order: "asc", After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range page {
			seen = append(seen, k.ID)
		}
		if !more {
			break
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(seen, ids) {
		t.Fatalf("asc pages: %v, want %v", seen, ids)
	}
	page, _, _ := s.ListSkills(ctx, "o_a", store.ListOptions{})
	if len(page) != 5 || page[0].ID != ids[4] {
		t.Fatalf("desc: %+v", page)
	}
	if page, more, err := s.ListSkills(ctx, "o_a", store.ListOptions{After: "skill_unknown"}); err != nil || more || len(page) != 0 {
		t.Fatalf("unknown after: %v %v %v", page, more, err)
	}
}

func testSkillQuotas(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	s := f(t, store.SkillLimits{Skills: 2, Versions: 2, OwnerBytes: 10}, nil)
	sk, _ := newSkill(t, s, "o_a", "a", []byte("1234"))
	var q *store.QuotaError
	if _, _, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_")}, []byte("1234567"), false); !errors.As(err, &q) {
		t.Fatalf("over the owner's bytes: %v", err)
	}
	if _, _, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_")}, []byte("12"), false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_")}, []byte("1"), false); !errors.As(err, &q) {
		t.Fatalf("a third version: %v", err)
	}
	newSkill(t, s, "o_a", "b", []byte("1"))
	if _, _, err := s.CreateSkill(ctx, store.Skill{ID: idgen.New("skill_"), Owner: "o_a"}, store.SkillVersion{ID: idgen.New("skillver_")}, nil); !errors.As(err, &q) {
		t.Fatalf("a third skill: %v", err)
	}
	// Deleting frees both.
	if err := s.DeleteSkill(ctx, "o_a", sk.ID); err != nil {
		t.Fatal(err)
	}
	newSkill(t, s, "o_a", "c", []byte("123456789"))
	// Another owner has its own bounds.
	newSkill(t, s, "o_b", "d", []byte("123456789"))
}

func testSkillConcurrentVersions(t *testing.T, f SkillsFactory) {
	ctx := context.Background()
	s := f(t, store.DefaultSkillLimits(), nil)
	sk, _ := newSkill(t, s, "o_a", "a", []byte("1"))
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, err := s.AddVersion(ctx, "o_a", sk.ID, store.SkillVersion{ID: idgen.New("skillver_"), Name: "a", Description: "d"}, []byte("x"), false)
			if err != nil {
				t.Error(err)
			}
			got[i] = v.Version
		}()
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, []int{2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("versions: %v", got)
	}
	if k, _ := s.GetSkill(ctx, "o_a", sk.ID); k.LatestVersion != 9 {
		t.Fatalf("latest: %+v", k)
	}
}
