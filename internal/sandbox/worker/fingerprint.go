package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"reflect"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// Fingerprint names what a server and a worker binary must agree on: the
// messages they exchange (every field of wire.Msg, its type and JSON name)
// and what the worker bakes into snapshots and runs in the guest
// (SnapshotRecipe: the kernel, the cell runner, the init programs). A
// server that starts a worker from another binary than itself compares
// the worker's fingerprint (its "fingerprint" mode) with its own first.
func Fingerprint() string {
	h := sha256.New()
	io.WriteString(h, "codeinterp-worker-v1\x00")
	io.WriteString(h, SnapshotRecipe())
	// Session states of another format are another origin's: kept for a
	// server that reads them, not refused as corrupt.
	fmt.Fprintf(h, "\x00state-format-%d\x00", stateFormat)
	writeSchema(h, reflect.TypeOf(wire.Msg{}), map[reflect.Type]bool{})
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// writeSchema writes t's shape: struct fields with their tags, element
// types, kinds. seen cuts recursive types.
func writeSchema(w io.Writer, t reflect.Type, seen map[reflect.Type]bool) {
	fmt.Fprintf(w, "%s:%s(", t.Kind(), t.Name())
	defer io.WriteString(w, ")")
	if seen[t] {
		return
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			fmt.Fprintf(w, "%s %q ", f.Name, f.Tag)
			writeSchema(w, f.Type, seen)
		}
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Map {
			writeSchema(w, t.Key(), seen)
		}
		writeSchema(w, t.Elem(), seen)
	}
}
