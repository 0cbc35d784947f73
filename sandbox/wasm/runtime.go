package wasm

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// RuntimeVersion is the CPython version runtime/build-python-wasi.sh builds.
const RuntimeVersion = "3.13.5"

// DefaultRuntimeDir finds the runtime the build script made:
// $CODEINTERP_RUNTIME_DIR if set, else the newest complete
// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/cpython-3.13.5-* directory.
func DefaultRuntimeDir() (string, error) {
	if d := os.Getenv("CODEINTERP_RUNTIME_DIR"); d != "" {
		return d, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w: no cache directory: %v", ErrRuntimeMissing, err)
		}
		base = filepath.Join(home, ".cache")
	}
	pattern := filepath.Join(base, "codeinterp", "cpython-"+RuntimeVersion+"-*")
	dirs, _ := filepath.Glob(pattern)
	type cand struct {
		dir string
		mod int64
	}
	var found []cand
	for _, d := range dirs {
		// MANIFEST is written last: its presence marks a finished build.
		if st, err := os.Stat(filepath.Join(d, "MANIFEST")); err == nil {
			found = append(found, cand{d, st.ModTime().UnixNano()})
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("%w: nothing matches %s: build it with `make runtime` (runtime/build-python-wasi.sh)", ErrRuntimeMissing, pattern)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].mod > found[j].mod })
	return found[0].dir, nil
}
