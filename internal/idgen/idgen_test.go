package idgen_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

func TestNewUnguessable(t *testing.T) {
	id := idgen.New("cntr_")
	if len(id) != len("cntr_")+48 || id == idgen.New("cntr_") {
		t.Errorf("New = %q", id)
	}
}

func TestRandomLengths(t *testing.T) {
	for _, digits := range []int{0, 1, 7, 16, 48, 50} {
		id := idgen.Random("p_", digits)
		if len(id) != len("p_")+digits {
			t.Errorf("Random(%q, %d) = %q", "p_", digits, id)
		}
		for _, c := range id[len("p_"):] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				t.Errorf("Random(%q, %d) = %q: not hex", "p_", digits, id)
			}
		}
	}
}

func TestTaggedIDs(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		digits int
	}{{"resp_", 50}, {"ci_", 50}, {"conv_", 48}, {"x_", 7}} {
		id := idgen.NewTagged(tc.prefix, tc.digits)
		if len(id) != len(tc.prefix)+tc.digits || !idgen.Tagged(id, tc.prefix) || !store.ValidID(id) {
			t.Errorf("NewTagged(%q, %d) = %q", tc.prefix, tc.digits, id)
		}
		if idgen.Tagged(id, "other_") {
			t.Errorf("%q is tagged for another prefix", id)
		}
	}
	for _, id := range []string{"resp_0123", "resp_c0de", "resp_c0deXYZ", "c0de12", "resp_C0DE12", ""} {
		if idgen.Tagged(id, "resp_") {
			t.Errorf("Tagged(%q) = true", id)
		}
	}
}

func TestNewItemPrefixes(t *testing.T) {
	for typ, prefix := range map[string]string{
		"message": "msg_", "": "msg_", "code_interpreter_call": "ci_", "function_call": "fc_",
		"reasoning": "rs_", "function_call_output": "function_", "web_search_call": "web_",
	} {
		id := idgen.NewItem(typ)
		if len(id) != len(prefix)+50 || id[:len(prefix)] != prefix {
			t.Errorf("NewItem(%q) = %q, want %s + 50 digits", typ, id, prefix)
		}
	}
}
