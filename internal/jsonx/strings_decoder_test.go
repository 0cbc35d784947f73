package jsonx

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestStringsDecoder: the commands of a shell call's arguments come out
// element by element however the arguments are cut, escapes and UTF-8
// sequences split across pieces included, equal to encoding/json's
// decoding; other members (before, after, nested) are skipped.
func TestStringsDecoder(t *testing.T) {
	for _, args := range []string{
		`{"commands":["ls -l","echo \"hi\" \u00e9\ud83d\ude00 ✓"],"timeout_ms":null,"max_output_length":null}`,
		`{"timeout_ms":5000,"x":{"commands":["no"]},"commands":[ "a" , "" ,"c\\n\n"],"max_output_length":3}`,
		`{"commands":[]}`,
		`{"max_output_length":null,"commands":["日本語のテキスト"]}`,
	} {
		var want struct{ Commands []string }
		if err := json.Unmarshal([]byte(args), &want); err != nil {
			t.Fatal(err)
		}
		for size := 1; size <= len(args); size++ {
			d := NewStringsDecoder("commands")
			var got []string
			ended := map[int]bool{}
			for i := 0; i < len(args); i += size {
				for _, p := range d.Feed(args[i:min(i+size, len(args))]) {
					if p.Start {
						if p.Index != len(got) {
							t.Fatalf("%s / %d: element %d started after %d", args, size, p.Index, len(got))
						}
						got = append(got, "")
					}
					if ended[p.Index] {
						t.Fatalf("%s / %d: piece after the end of %d", args, size, p.Index)
					}
					got[p.Index] += p.Text
					ended[p.Index] = p.End
				}
			}
			if want.Commands == nil {
				want.Commands = []string{}
			}
			if got == nil {
				got = []string{}
			}
			if !reflect.DeepEqual(got, want.Commands) || !d.Done() || len(ended) != len(got) {
				t.Fatalf("%s / %d: %q (done %v), want %q", args, size, got, d.Done(), want.Commands)
			}
			for k := range got {
				if !ended[k] {
					t.Fatalf("%s / %d: element %d never ended", args, size, k)
				}
			}
		}
	}
}
