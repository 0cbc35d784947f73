package cellrunner

import _ "embed"

//go:embed cellrunner.py
var source string

// Prepend returns kernel's source with the cell runner before it: the
// program the interpreter is to run. What the kernel runs depends on both,
// so anything that identifies it (a snapshot's recipe, a checkpoint's
// stamp) must be computed from this, not from the kernel's file alone.
func Prepend(kernel string) string { return source + "\n" + kernel }
