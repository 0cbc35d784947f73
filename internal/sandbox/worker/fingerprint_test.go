package worker

import (
	"reflect"
	"strings"
	"testing"
)

// TestFingerprintSchema: the schema part of the fingerprint sees a field's
// name, its JSON tag and its type, so a change to any message changes it.
func TestFingerprintSchema(t *testing.T) {
	type a struct {
		X int `json:"x"`
	}
	type renamed struct {
		Y int `json:"x"`
	}
	type retagged struct {
		X int `json:"y"`
	}
	type retyped struct {
		X string `json:"x"`
	}
	type nested struct{ A *a }
	type nestedRetyped struct{ A *retyped }
	schema := func(v any) string {
		var b strings.Builder
		writeSchema(&b, reflect.TypeOf(v), map[reflect.Type]bool{})
		return strings.ReplaceAll(b.String(), reflect.TypeOf(v).Name(), "T")
	}
	base := schema(a{})
	for name, v := range map[string]any{"renamed": renamed{}, "retagged": retagged{}, "retyped": retyped{}} {
		if schema(v) == base {
			t.Errorf("%s field: the schema %s did not change", name, base)
		}
	}
	if schema(nested{}) == schema(nestedRetyped{}) {
		t.Error("a field of a nested struct changed type: the schema did not change")
	}
	if first, again := Fingerprint(), Fingerprint(); len(first) != 32 || first != again {
		t.Errorf("Fingerprint() = %q then %q: want 32 hex digits, the same each time", first, again)
	}
}
