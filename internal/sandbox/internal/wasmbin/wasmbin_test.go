package wasmbin

import (
	"bytes"
	"testing"
)

// A hand-assembled module: one imported mutable global, two defined
// globals (one mutable, exported as "sp"), one memory and an active data
// segment.
var module = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	// import: "env" "g" global i32 mut
	0x02, 0x0a, 0x01, 0x03, 'e', 'n', 'v', 0x01, 'g', 0x03, 0x7f, 0x01,
	// memory: min 1
	0x05, 0x03, 0x01, 0x00, 0x01,
	// global: i32 mut (i32.const 1024), i32 const (i32.const 5)
	0x06, 0x0c, 0x02, 0x7f, 0x01, 0x41, 0x80, 0x08, 0x0b, 0x7f, 0x00, 0x41, 0x05, 0x0b,
	// export: "sp" global 1
	0x07, 0x06, 0x01, 0x02, 's', 'p', 0x03, 0x01,
	// data: one active segment at 0: "hi"
	0x0b, 0x08, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x02, 'h', 'i',
}

func TestGlobals(t *testing.T) {
	gs, err := Globals(module)
	if err != nil {
		t.Fatal(err)
	}
	want := []Global{
		{Index: 0, Mutable: true, Imported: true},
		{Index: 1, Mutable: true, Export: "sp"},
		{Index: 2},
	}
	if len(gs) != len(want) {
		t.Fatalf("got %+v, want %+v", gs, want)
	}
	for i := range want {
		if gs[i] != want[i] {
			t.Errorf("global %d: got %+v, want %+v", i, gs[i], want[i])
		}
	}
}

func TestStripData(t *testing.T) {
	out, err := StripData(module)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("hi")) {
		t.Fatal("the data segment is still there")
	}
	if !bytes.HasSuffix(out, []byte{0x0b, 0x01, 0x00}) {
		t.Fatalf("data section not emptied: % x", out[len(out)-8:])
	}
	// Everything before the data section is unchanged and still parses.
	if !bytes.Equal(out[:len(out)-3], module[:len(module)-10]) {
		t.Fatal("other sections changed")
	}
	if _, err := Globals(out); err != nil {
		t.Fatal(err)
	}
}

func TestTruncated(t *testing.T) {
	for _, n := range []int{0, 7, 12, 21, len(module) - 1} {
		if _, err := Globals(module[:n]); err == nil {
			t.Errorf("%d bytes: no error", n)
		}
	}
}
