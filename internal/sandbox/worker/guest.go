package worker

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

func instantiateWASI(ctx context.Context, rt wazero.Runtime) (api.Closer, error) {
	c, err := wasi_snapshot_preview1.Instantiate(ctx, rt)
	if err != nil {
		return nil, fmt.Errorf("wasi: %w", err)
	}
	return c, nil
}

// guestFS is everything the guest can see of a filesystem: the stdlib,
// read-only, where the interpreter's compiled-in prefix expects it, and the
// session's scratch space.
func guestFS(libDir string, sc *scratch) wazero.FSConfig {
	return withScratch(wazero.NewFSConfig().WithReadOnlyDirMount(libDir, "/usr/local/lib"), sc)
}
