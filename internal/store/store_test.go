package store_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in      store.ListOptions
		limit   int
		order   string
		wantErr bool
	}{
		{store.ListOptions{}, 20, "desc", false},
		{store.ListOptions{Limit: -3}, 1, "desc", false},
		{store.ListOptions{Limit: 1, Order: "asc"}, 1, "asc", false},
		{store.ListOptions{Limit: 100, Order: "desc"}, 100, "desc", false},
		{store.ListOptions{Limit: 101}, 100, "desc", false},
		{store.ListOptions{Order: "ASC"}, 0, "", true},
	} {
		got, err := tc.in.Normalize()
		if (err != nil) != tc.wantErr {
			t.Errorf("Normalize(%+v) error %v", tc.in, err)
			continue
		}
		if !tc.wantErr && (got.Limit != tc.limit || got.Order != tc.order) {
			t.Errorf("Normalize(%+v) = %+v; want limit %d order %s", tc.in, got, tc.limit, tc.order)
		}
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{idgen.New("cntr_"), true},
		{idgen.New("cfile_"), true},
		{"file-abc.DEF_1", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"a b", false},
		{"a:b", false},
		{"{a}", false},
		{"a/b", false},
		{"é", false},
	} {
		if got := store.ValidID(tc.id); got != tc.want {
			t.Errorf("ValidID(%q) = %v", tc.id, got)
		}
	}
}

// TestOwnerAPIKey: an Anthropic client's x-api-key is the owner of the
// same key as a Bearer token, and of no other; a configured x-api-key
// header keeps its own meaning.
func TestOwnerAPIKey(t *testing.T) {
	names := store.DefaultAuthHeaders()
	bearer, ok1 := store.Owner(http.Header{"Authorization": {"Bearer sk-1"}}, names)
	key, ok2 := store.Owner(http.Header{"X-Api-Key": {"sk-1"}}, names)
	other, _ := store.Owner(http.Header{"X-Api-Key": {"sk-2"}}, names)
	none, ok3 := store.Owner(http.Header{"X-Api-Key": {"  "}}, names)
	anon, _ := store.Owner(http.Header{}, names)
	if !ok1 || !ok2 || bearer != key || other == key || ok3 || none != anon {
		t.Fatalf("bearer %s key %s other %s none %s/%v anon %s", bearer, key, other, none, ok3, anon)
	}
	both, _ := store.Owner(http.Header{"Authorization": {"Bearer sk-1"}, "X-Api-Key": {"sk-2"}}, names)
	if both != bearer {
		t.Fatalf("authorization wins over x-api-key: %s", both)
	}
	own := append(names, "x-api-key")
	if k, _ := store.Owner(http.Header{"X-Api-Key": {"sk-1"}}, own); k == bearer {
		t.Fatal("a configured x-api-key header must keep its own owner")
	}
}
