package wasm

import (
	"fmt"

	"github.com/codeinterp/codeinterp/internal/buildcache"
)

// RuntimeVersion is the CPython version runtime/build-python-wasi.sh builds.
const RuntimeVersion = "3.13.5"

// DefaultRuntimeDir finds the runtime the build script made:
// $CODEINTERP_RUNTIME_DIR if set, else the newest complete
// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/cpython-3.13.5-* directory.
func DefaultRuntimeDir() (string, error) {
	d, err := buildcache.Find("CODEINTERP_RUNTIME_DIR", "cpython-"+RuntimeVersion+"-")
	if err != nil {
		return "", fmt.Errorf("%w: %v: build it with `make runtime` (runtime/build-python-wasi.sh)", ErrRuntimeMissing, err)
	}
	return d, nil
}
