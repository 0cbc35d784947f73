package store_test

import (
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/store"
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
		{store.NewID("cntr_"), true},
		{store.NewID("cfile_"), true},
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

func TestNewIDUnguessable(t *testing.T) {
	id := store.NewID("cntr_")
	if len(id) != len("cntr_")+48 || id == store.NewID("cntr_") {
		t.Errorf("NewID = %q", id)
	}
}

func TestTaggedIDs(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		digits int
	}{{"resp_", 50}, {"ci_", 50}, {"conv_", 48}, {"x_", 7}} {
		id := store.NewTaggedID(tc.prefix, tc.digits)
		if len(id) != len(tc.prefix)+tc.digits || !store.Tagged(id, tc.prefix) || !store.ValidID(id) {
			t.Errorf("NewTaggedID(%q, %d) = %q", tc.prefix, tc.digits, id)
		}
		if store.Tagged(id, "other_") {
			t.Errorf("%q is tagged for another prefix", id)
		}
	}
	for _, id := range []string{"resp_0123", "resp_c0de", "resp_c0deXYZ", "c0de12", "resp_C0DE12", ""} {
		if store.Tagged(id, "resp_") {
			t.Errorf("Tagged(%q) = true", id)
		}
	}
}
